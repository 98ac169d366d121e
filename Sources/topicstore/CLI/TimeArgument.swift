import Foundation
import SubscriptionLog

/// Times given on the command line (`replay --at`), read strictly by
/// `TimeText`: milliseconds since 1970 (between 2000 and 2200, so seconds are
/// caught), a date (midnight UTC), or a date and time with seconds and a zone.
/// Anything else, a partial parse or trailing text included, is a usage error
/// (exit 2) naming the option and the accepted forms.
enum TimeArgument {
    static func milliseconds(_ text: String, option: String) throws(UsageError) -> Int64 {
        do {
            return try TimeText.milliseconds(text)
        } catch {
            throw UsageError(description: "--\(option) '\(text)' is not a time: \(error.reason). Accepted forms: \(TimeText.forms)")
        }
    }

    /// `ms` in ISO 8601 with milliseconds (UTC). `TimeText` writes it by hand:
    /// an `ISO8601DateFormatter` made per call cost ~70 µs, most of a history line.
    static func iso(_ ms: Int64) -> String { TimeText.iso(ms) }
}
