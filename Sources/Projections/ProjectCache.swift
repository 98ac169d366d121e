/// The project records a writer holds, by name, with the project of the last
/// lookup at hand: events come in runs of one project, and hashing its name
/// twice per event (to read the record, then to write it back) was about 3%
/// of the live writer's instructions (callgrind, `load`).
struct ProjectCache {
    typealias Entry = ProjectionWriter.Cached<ProjectRecord>

    /// Names and entries, in the order the projects were first held.
    private(set) var names: [String] = []
    private var entries: [Entry] = []
    private var slots: [String: Int] = [:]
    /// The slot of the last project found or added (-1: none).
    private var last = -1

    /// The slot of project `name`, if held.
    mutating func slot(of name: String) -> Int? {
        if last >= 0, names[last] == name { return last }
        guard let slot = slots[name] else { return nil }
        last = slot
        return slot
    }

    subscript(slot: Int) -> Entry {
        get { entries[slot] }
        _modify { yield &entries[slot] }
    }

    /// Holds `entry` for `name`, replacing what was held for it.
    mutating func set(_ name: String, _ entry: Entry) {
        if let slot = slot(of: name) {
            entries[slot] = entry
        } else {
            last = names.count
            slots[name] = names.count
            names.append(name)
            entries.append(entry)
        }
    }

    var indices: Range<Int> { entries.indices }

    mutating func removeAll() {
        names = []
        entries = []
        slots = [:]
        last = -1
    }
}
