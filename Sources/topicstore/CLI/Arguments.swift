/// A command's declared options, used to parse its arguments and print `--help`.
struct CommandSpec {
    struct Option {
        var name: String          // without the leading --
        var value: String?        // placeholder when the option takes a value
        var help: String
    }
    var name: String
    var summary: String
    var usage: String
    var options: [Option]
    var details: String = ""

    /// Every command takes these.
    static let common: [Option] = [
        Option(name: "data", value: "DIR", help: "the store directory (default ./data)"),
        Option(name: "json", value: nil, help: "print JSON for scripts"),
        Option(name: "help", value: nil, help: "show this help"),
    ]

    var helpText: String {
        var lines = ["usage: topicstore \(usage)", "", summary, "", "options:"]
        for o in options + Self.common {
            let left = "  --\(o.name)" + (o.value.map { " \($0)" } ?? "")
            lines.append(left.padding(toLength: max(left.count + 2, 26), withPad: " ", startingAt: 0) + o.help)
        }
        if !details.isEmpty { lines += ["", details] }
        lines += ["", ExitCode.documentation]
        return lines.joined(separator: "\n")
    }
}

struct UsageError: Error, CustomStringConvertible {
    let description: String
}

/// Parsed arguments: options by name (repeatable), flags, and positionals.
struct Arguments {
    private(set) var values: [String: [String]] = [:]
    private(set) var flags: Set<String> = []
    private(set) var positionals: [String] = []

    /// Parses `args` by `spec`. Unless `takesOperands`, a positional argument
    /// is a usage error: a command that takes only options never ignores one.
    init(_ args: [String], spec: CommandSpec, takesOperands: Bool = true) throws(UsageError) {
        let all = spec.options + CommandSpec.common
        var i = 0
        var onlyPositionals = false
        while i < args.count {
            let arg = args[i]
            i += 1
            if onlyPositionals || !arg.hasPrefix("--") || arg == "-" {
                guard takesOperands else {
                    throw UsageError(description: "unexpected argument '\(arg)': 'topicstore \(spec.name)' takes only options (see --help)")
                }
                positionals.append(arg)
                continue
            }
            if arg == "--" { onlyPositionals = true; continue }
            var name = String(arg.dropFirst(2))
            var inlineValue: String?
            if let eq = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: eq)...])
                name = String(name[..<eq])
            }
            guard let option = all.first(where: { $0.name == name }) else {
                throw UsageError(description: "unknown option --\(name) for 'topicstore \(spec.name)' (see --help)")
            }
            if option.value != nil {
                let value: String
                if let inlineValue { value = inlineValue } else {
                    guard i < args.count else { throw UsageError(description: "--\(name) needs a value \(option.value!)") }
                    value = args[i]
                    i += 1
                }
                values[name, default: []].append(value)
            } else {
                guard inlineValue == nil else { throw UsageError(description: "--\(name) takes no value") }
                flags.insert(name)
            }
        }
    }

    /// Refuses an option given that `action` does not take (the actions of one command share
    /// its option list): an option ignored was an option acted on as if absent, and `key revoke
    /// ID --project beta` revoked another project's key.
    func accepts(only allowed: [String], in action: String) throws(UsageError) {
        let common = CommandSpec.common.map(\.name)
        for name in (Array(values.keys) + Array(flags)).sorted() where !allowed.contains(name) && !common.contains(name) {
            throw UsageError(description: "--\(name) is not an option of 'topicstore \(action)' (see --help)")
        }
    }

    func value(_ name: String) -> String? { values[name]?.last }
    func all(_ name: String) -> [String] { values[name] ?? [] }
    func has(_ name: String) -> Bool { flags.contains(name) }
    var dataDirectory: String { value("data") ?? "./data" }
    var json: Bool { has("json") }

    /// A log sequence number: decimal digits only (`+5` was taken for 5 while `--at +…` was refused).
    func sequence(_ name: String) throws(UsageError) -> UInt64? {
        guard let text = value(name) else { return nil }
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let n = UInt64(text) else {
            throw UsageError(description: "--\(name) must be a sequence number, not '\(text)'")
        }
        return n
    }

    func integer(_ name: String) throws(UsageError) -> Int? {
        guard let text = value(name) else { return nil }
        guard let n = Int(text) else { throw UsageError(description: "--\(name) must be an integer, not '\(text)'") }
        return n
    }
}

/// Exit codes shared by every subcommand.
enum ExitCode: Int32 {
    case success = 0
    case failure = 1
    case usage = 2
    case notADatabase = 3
    case verificationFailed = 4
    case invalidInput = 5
    case interrupted = 6
    case busy = 7

    static let documentation = """
    exit codes: 0 success; 1 error while running; 2 bad usage (an unknown option, a missing
    or malformed value, an unexpected argument); 3 the directory is not a topicstore
    database (missing, empty, or not written by topicstore); 4 verification found
    differences or corruption; 5 invalid input (for example bad lines given to load);
    6 stopped by SIGTERM or SIGINT after committing what it had read (load); 7 busy:
    another compaction is running on the store (compact; nothing was done, try later)
    """
}

/// A subcommand of `topicstore`.
protocol Command {
    static var spec: CommandSpec { get }
    /// Whether the command takes operands (positional arguments: an action,
    /// a FILE, TOPICs, a DEVICE_ID), which it then checks itself. Most take
    /// none, and an operand given to them is a usage error (exit 2). The
    /// commands that take some say so in Operands.swift.
    static var takesOperands: Bool { get }
    /// Whether the command takes SIGTERM and SIGINT as a request to stop
    /// (`StopSignals`): `main` blocks them before it runs.
    static var stopsOnSignal: Bool { get }
    static func run(_ arguments: Arguments) throws -> ExitCode
}

extension Command {
    static var takesOperands: Bool { false }
    static var stopsOnSignal: Bool { false }
}
