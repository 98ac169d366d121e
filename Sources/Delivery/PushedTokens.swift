/// The tokens one notification has been pushed to, as 64-bit hashes (Swift's `Hasher`,
/// seeded per process), so that a token is not pushed twice by one notification: a token
/// that moves from a device already pushed to one the walk has not reached yet (an app
/// reinstalled during the send) would otherwise be pushed again, to the same phone.
///
/// About 12 bytes per push, for the one delivery in progress (some 120 MB for ten million
/// devices). Only devices whose token changed lately are looked up (`DeliveryWorker`), which
/// keeps the chance that a hash collision skips a device that should be pushed negligible.
/// It lives in memory: after a restart it starts again from the batch the delivery resumes at.
struct PushedTokens {
    private var hashes = Set<Int>()

    var count: Int { hashes.count }

    mutating func insert(_ token: String) { hashes.insert(token.hashValue) }

    func contains(_ token: String) -> Bool { hashes.contains(token.hashValue) }
}
