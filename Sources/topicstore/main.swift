import Foundation
import LMDB
import Replay
import TopicStore

/// Every subcommand, in the order `topicstore --help` lists them.
let commands: [any Command.Type] = [
    ServeCommand.self,
    ProjectCommand.self,
    KeyCommand.self,
    CredentialsCommand.self,
    LoadCommand.self,
    AudienceCommand.self,
    TopicsCommand.self,
    DeviceCommand.self,
    StatsCommand.self,
    ReplayCommand.self,
    AuditCommand.self,
    HistoryCommand.self,
    ExportCommand.self,
    ImportCommand.self,
    BackupCommand.self,
    CompactCommand.self,
    BenchCommand.self,
    BenchSendCommand.self,
    BenchHTTPCommand.self,
]

@MainActor func mainUsage() -> String {
    var lines = ["usage: topicstore COMMAND [options]   (topicstore COMMAND --help for more)", "", "commands:"]
    for c in commands {
        lines.append("  " + c.spec.name.padding(toLength: 12, withPad: " ", startingAt: 0) + c.spec.summary)
    }
    lines += ["", ExitCode.documentation]
    return lines.joined(separator: "\n")
}


let argv = Array(CommandLine.arguments.dropFirst())
guard let name = argv.first, name != "--help", name != "-h", name != "help" else {
    print(mainUsage())
    exit(argv.isEmpty ? ExitCode.usage.rawValue : ExitCode.success.rawValue)
}
guard let command = commands.first(where: { $0.spec.name == name }) else {
    Console.printError("unknown command '\(name)'\n\n" + mainUsage())
    exit(ExitCode.usage.rawValue)
}
if command.stopsOnSignal { StopSignals.block() }
let code: ExitCode
/// The store the command was given (for messages about its damage).
var dataDirectory = "./data"
do {
    let arguments = try Arguments(Array(argv.dropFirst()), spec: command.spec, takesOperands: command.takesOperands)
    dataDirectory = arguments.dataDirectory
    if arguments.has("help") {
        print(command.spec.helpText)
        code = .success
    } else {
        code = try command.run(arguments)
    }
} catch let error as UsageError {
    Console.printError(error.description)
    code = .usage
} catch let error as StoreError {
    Console.printError(error.description)
    switch error {
    case .notADatabase, .unsupportedSchema: code = .notADatabase
    case .corruptHead, .damaged: code = .verificationFailed
    default: code = .failure
    }
} catch let error as TruncatedDataFile {
    // A store's file cut short is corruption, found before it could kill the process.
    Console.printError(error.description)
    code = .verificationFailed
} catch let error as DamagedMetaPage {
    // So is a meta page naming more pages than a file can hold.
    Console.printError(error.description)
    code = .verificationFailed
} catch let error as InvalidMetaPage {
    // And one meta page LMDB cannot read beside a valid one: LMDB calls the file not its own.
    Console.printError(error.description)
    code = .verificationFailed
} catch let error as ReplayError {
    Console.printError(error.description)
    switch error {
    // The log is damaged where it was read (a record, a key, a gap): corruption, as audit says it.
    case .cannotFold, .damagedRecord, .damagedLog, .snapshotHeadMismatch, .checkpointMismatch: code = .verificationFailed
    default: code = .failure
    }
} catch let error as CocoaError {
    // Foundation's file errors print as an NSError dump; say what failed, and where.
    let path = error.filePath ?? error.userInfo[NSFilePathErrorKey] as? String
    let underlying = (error.userInfo[NSUnderlyingErrorKey] as? NSError).flatMap { e in
        e.domain == NSPOSIXErrorDomain ? String(cString: strerror(Int32(e.code))) : nil
    }
    Console.printError([error.localizedDescription, underlying, path.map { "(\($0))" }].compactMap { $0 }.joined(separator: " "))
    code = .failure
} catch {
    if let damage = TopicStore.damage(in: error, directory: dataDirectory) {
        // A damaged file met on the way (a projection value, LMDB's MDB_CORRUPTED, MDB_PAGE_NOTFOUND,
        // MDB_BAD_TXN): corruption, exit 4, with where to look, rather than a bare error and exit 1.
        Console.printError(damage.description)
        code = .verificationFailed
    } else {
        Console.printError("\(error)")
        code = .failure
    }
}
fflush(nil)
exit(code.rawValue)
