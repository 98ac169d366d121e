import SubscriptionLog

extension RecipientCache {
    /// What a count needs of a device record, kept beside where the record is:
    /// a count of a few devices then reads no record at all.
    enum Reach: UInt8 {
        /// No record (never written, or deleted).
        case none = 0
        /// A record with no live token, or a live one of another platform.
        case unreachable
        /// A live iOS token.
        case ios
        /// A live Android token.
        case android
        /// A record that does not decode: counts go to the snapshot, which reports it.
        case undecodable

        init(_ fields: DeviceRecord.Fields?) {
            guard let f = fields else { self = .undecodable; return }
            guard f.live else { self = .unreachable; return }
            switch f.platform {
            case Platform.ios.rawValue: self = .ios
            case Platform.android.rawValue: self = .android
            default: self = .unreachable
            }
        }
    }

    /// One ordinal of a column: 16 bytes, so that a count of one device
    /// touches one cache line of the column and none of the arena. (Two arrays,
    /// the handles and the sequences, and the record itself in the arena were
    /// three cache misses for a per-user topic not counted lately: ~0.7 µs in
    /// a loop over random per-user topics at 1M devices, most of it those misses.)
    struct Cell {
        /// The sequence of the event that last wrote the record.
        var changed: UInt64 = 0
        /// Where the record is in the arena (a `RecordArena` handle, split).
        var offset: UInt32 = 0
        var segment: UInt16 = 0
        var reach: Reach = .none

        /// The record's arena handle; nil when there is no record.
        var handle: Int? { reach == .none ? nil : Int(segment) << 32 | Int(offset) }

        /// What the device reaches in a snapshot at sequence `asOf` (`.ios`,
        /// `.android` or `.unreachable`); nil when the cell cannot tell: the
        /// record changed after it, or there is none, or it does not decode
        /// (the snapshot then answers, and reports a damaged one).
        @inline(__always)
        func reach(asOf: UInt64) -> Reach? {
            guard changed <= asOf else { return nil }
            switch reach {
            case .ios, .android, .unreachable: return reach
            case .none, .undecodable: return nil
            }
        }
    }

    /// One project's records by ordinal, in memory the cache allocates and
    /// frees itself (`free`): a count reads a column under the lock without
    /// retaining and releasing an array (two arrays were a fifth of a per-user
    /// topic's count). A copy shares the memory; only the copy kept in the
    /// cache's `columns` is freed.
    struct Column {
        private(set) var cells = UnsafeMutableBufferPointer<Cell>(start: nil, count: 0)

        /// Sets ordinal `ordinal` to the record at `handle` (nil: no record)
        /// with what a count needs of it, last written by the event at `changed`.
        mutating func set(_ ordinal: UInt32, handle: Int?, reach: Reach, changed seq: UInt64) {
            let i = Int(ordinal)
            if i >= cells.count { grow(to: max(i + 1, cells.count * 2)) }
            guard let handle else {
                cells[i] = Cell(changed: seq)
                return
            }
            precondition(reach != .none && handle >= 0 && handle >> 32 <= Int(UInt16.max), "record handle \(handle) out of range")
            cells[i] = Cell(changed: seq, offset: UInt32(truncatingIfNeeded: handle), segment: UInt16(handle >> 32), reach: reach)
        }

        /// Moves ordinal `i`'s record, which it has, to `handle` (`compactArena`).
        mutating func move(_ i: Int, to handle: Int) {
            precondition(cells[i].reach != .none && handle >= 0 && handle >> 32 <= Int(UInt16.max), "record handle \(handle) out of range")
            cells[i].offset = UInt32(truncatingIfNeeded: handle)
            cells[i].segment = UInt16(handle >> 32)
        }

        private mutating func grow(to n: Int) { grow(into: Self.emptyCells(n)) }

        /// `n` empty cells, backed by huge pages: what a column grows into,
        /// here or on another thread (`RecipientCache.prepareGrowth`).
        static func emptyCells(_ n: Int) -> UnsafeMutableBufferPointer<Cell> {
            let cells = UnsafeMutableBufferPointer<Cell>.allocate(capacity: n)
            // A count reads the cells of its devices at random (16 MiB at 1M devices).
            adviseHugePages(UnsafeMutableRawBufferPointer(cells))
            cells.initialize(repeating: Cell())
            return cells
        }

        /// Moves the cells into `larger` (empty cells, more of them), which the column then owns.
        mutating func grow(into larger: UnsafeMutableBufferPointer<Cell>) {
            precondition(larger.count > cells.count, "a column grows into more cells")
            _ = larger.update(fromContentsOf: cells)
            cells.deallocate()
            cells = larger
        }

        /// Frees the memory (this column and its copies must not be used afterwards).
        func free() { cells.deallocate() }
    }

    /// A cache's columns by project id. A file gives projects ids from 1 up,
    /// one per project it ever held, so ids below `denseIDs` index an array; a
    /// dictionary holds any beyond. (A `[UInt32: Column]` hashed the id for
    /// every count: 115 of the 930 instructions of a per-user topic's, callgrind.)
    struct ColumnsByProject {
        private var dense: [Column?] = []
        private var sparse: [UInt32: Column] = [:]
        /// Ids below this are held in `dense` (a slot costs 24 bytes).
        static let denseIDs = 1 << 12

        subscript(pid: UInt32) -> Column? {
            @inline(__always) get {
                let i = Int(pid)
                if i < dense.count { return dense[i] }
                return i < Self.denseIDs ? nil : sparse[pid]
            }
            set {
                let i = Int(pid)
                guard i < Self.denseIDs else {
                    sparse[pid] = newValue
                    return
                }
                if i >= dense.count {
                    guard newValue != nil else { return }
                    dense.append(contentsOf: repeatElement(nil, count: i + 1 - dense.count))
                }
                dense[i] = newValue
            }
        }

        /// Takes project `pid`'s column out (nil: none).
        mutating func removeValue(forKey pid: UInt32) -> Column? {
            defer { self[pid] = nil }
            return self[pid]
        }

        /// The ids of the projects with a column.
        var pids: [UInt32] {
            dense.indices.filter { dense[$0] != nil }.map { UInt32($0) } + sparse.keys.sorted()
        }

        /// Every column.
        var all: [Column] { dense.compactMap { $0 } + Array(sparse.values) }

        /// Frees every column's memory (they and their copies must not be used afterwards).
        func free() { for c in all { c.free() } }
    }
}
