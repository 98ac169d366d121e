/// Values by project and topic id, as `OrdinalColumns` would hold them if
/// topic ids were dense: the ids of single topics (2^31 and up, see
/// `ProjectionTables.TopicLayout`) go to columns of their own, each range dense.
struct TopicColumns<Element> {
    private var shared: OrdinalColumns<Element>
    private var singles: OrdinalColumns<Element>
    private static var bit: UInt32 { ProjectionTables.singleTopicBit }

    init(empty: Element) {
        shared = OrdinalColumns(empty: empty)
        singles = OrdinalColumns(empty: empty)
    }

    /// Values allocated in all columns (set or `empty`).
    var slots: Int { shared.slots + singles.slots }

    /// The value of topic `tid`, or nil beyond its column's end (never set).
    @inline(__always)
    mutating func value(_ pid: UInt32, _ tid: UInt32) -> Element? {
        tid & Self.bit == 0 ? shared.value(pid, tid) : singles.value(pid, tid & ~Self.bit)
    }

    /// Sets the value of topic `tid`; returns what was there (`empty` when new).
    @discardableResult
    mutating func set(_ pid: UInt32, _ tid: UInt32, _ value: Element) -> Element {
        tid & Self.bit == 0 ? shared.set(pid, tid, value) : singles.set(pid, tid & ~Self.bit, value)
    }

    /// Sets the value of topic `tid`, dropping what was there without copying it out.
    @inline(__always)
    mutating func update(_ pid: UInt32, _ tid: UInt32, _ value: Element) {
        if tid & Self.bit == 0 { shared.update(pid, tid, value) } else { singles.update(pid, tid & ~Self.bit, value) }
    }

    /// Every value in key order: projects ascending, and in each its shared
    /// topics, then its single topics, ids ascending.
    func forEachInKeyOrder(_ body: (Element) -> Void) {
        for pid in Set(shared.projects).union(singles.projects).sorted() {
            shared.forEachValue(ofProject: pid, body)
            singles.forEachValue(ofProject: pid, body)
        }
    }
}

extension TopicColumns: Sendable where Element: Sendable {}
