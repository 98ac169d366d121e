/// The commands that take operands (positional arguments), in one list: every
/// other command takes only options, and refuses an operand with exit 2 (see
/// `Command.takesOperands`). Each of these checks its operands itself.
extension ProjectCommand { static var takesOperands: Bool { true } }      // add NAME | list
extension KeyCommand { static var takesOperands: Bool { true } }          // add | revoke KEY | list
extension CredentialsCommand { static var takesOperands: Bool { true } }  // set | list | remove
extension LoadCommand { static var takesOperands: Bool { true } }         // FILE | -
extension ImportCommand { static var takesOperands: Bool { true } }       // FILE | -
extension AudienceCommand { static var takesOperands: Bool { true } }     // TOPIC…
extension DeviceCommand { static var takesOperands: Bool { true } }       // DEVICE_ID
