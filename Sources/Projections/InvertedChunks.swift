import Foundation

/// A build's topic chunks made from its devices' lists (`PostingInversion`)
/// on a thread of their own, in key order (project, slice, topic id), a
/// slice at a time and at most `bytesAhead` bytes ahead of the writer that
/// takes them (`next`).
///
/// Made all at once before the write reached the postings table, they were
/// held whole beside everything else the write holds: 1.24 GB at 10M devices
/// with eight subscriptions each (the largest piece but one of the heap at
/// the peak of `replay --projections-only` of bench's 10M store, jemalloc's
/// heap profile), in arrays grown by doubling. The thread starts at once, so
/// it works beside the writer's other tables until it is that far ahead.
final class InvertedChunks: @unchecked Sendable {
    /// What the inversion reads: copies (arrays shared until written, and
    /// nothing writes them before the build is written and let go).
    struct Input: Sendable {
        /// Each project's devices' membership slots by ordinal, + 1 (0: none).
        var projects: [(pid: UInt32, memberSlots: [Int32])]
        var lists: MembershipLists.Snapshot
        /// A topic's cache slot (+ 1), below `topicCount`.
        var topicSlots: TopicColumns<Int32>
        var topicCount: Int
    }

    /// A chunk: its key, its topic's cache slot, and its stored bytes, valid until the next `next()`.
    struct Chunk {
        var key: ProjectionWriter.ChunkKey
        var slot: Int32
        var bytes: UnsafeRawBufferPointer
    }

    /// One slice of one project: its chunks serialized back to back, in topic order.
    private final class Block {
        var keys: [ProjectionWriter.ChunkKey] = []
        var slots: [Int32] = []
        var ends: [Int] = []
        let bytes: UnsafeMutableRawBufferPointer

        init(byteCount: Int) { bytes = .allocate(byteCount: max(byteCount, 1), alignment: 16) }
        deinit { bytes.deallocate() }
    }

    private struct Stopped: Error {}

    private let bytesAhead: Int
    private let condition = NSCondition()
    /// Under `condition`: blocks made and not yet taken (oldest first), the
    /// bytes of those and of the one being taken, and how the maker ended.
    private var ready: [Block] = []
    private var bytesHeld = 0
    private var made = false
    private var failure: (any Error)?
    private var stopped = false
    private var maker: HelperThread<Void>?
    /// The writer's place: the block it takes chunks from, and the next one's index.
    private var current: Block?
    private var index = 0

    /// Starts making the chunks of `input`.
    init(_ input: Input, bytesAhead: Int = 64 << 20) {
        self.bytesAhead = bytesAhead
        maker = HelperThread(name: "build-chunks") { [self] in
            do {
                try Self.invert(input) { try hand($0) }
                finish(nil)
            } catch is Stopped {
                finish(nil)
            } catch {
                finish(error)
            }
        }
    }

    private func finish(_ error: (any Error)?) {
        condition.changing { (made, failure) = (true, error) }
    }

    /// Hands a block to the writer, waiting while `bytesAhead` are held
    /// (unless none is: a larger slice still goes). Throws once stopped.
    private func hand(_ block: Block) throws {
        try condition.waiting(while: { bytesHeld > 0 && bytesHeld + block.bytes.count > bytesAhead && !stopped }) {
            if stopped { throw Stopped() }
            ready.append(block)
            bytesHeld += block.bytes.count
            condition.broadcast()
        }
    }

    /// The next chunk in key order, waiting for it; nil after the last.
    /// Throws what the inversion threw (a membership of a missing topic).
    func next() throws -> Chunk? {
        while true {
            if let block = current {
                if index < block.keys.count {
                    let start = index == 0 ? 0 : block.ends[index - 1]
                    let chunk = Chunk(key: block.keys[index], slot: block.slots[index],
                                      bytes: UnsafeRawBufferPointer(rebasing: block.bytes[start..<block.ends[index]]))
                    index += 1
                    return chunk
                }
                condition.changing { bytesHeld -= block.bytes.count }
                current = nil
            }
            let taken = try condition.waiting(while: { ready.isEmpty && !made }) { () throws -> Block? in
                if ready.isEmpty, let failure { throw failure }
                return ready.isEmpty ? nil : ready.removeFirst()
            }
            guard let taken else { return nil }
            current = taken
            index = 0
        }
    }

    /// Tells the maker to stop (it may be waiting for the writer) and waits
    /// for it to end. The writer calls it on every way out: the thread holds
    /// this object until it ends.
    func close() {
        condition.changing { stopped = true }
        try? maker?.join()
        maker = nil
    }

    /// Inverts every project's lists, handing each slice's chunks over serialized.
    private static func invert(_ input: Input, hand: (Block) throws -> Void) throws {
        var inversion = PostingInversion(topicCount: input.topicCount)
        var topicSlots = input.topicSlots  // (`value` is mutating)
        // One slice's chunks, put in topic order before they are serialized.
        var slice: [(tid: UInt32, slot: Int32, set: PostingSet)] = []
        var pid: UInt32 = 0, high: UInt16 = 0
        func handSlice() throws {
            guard !slice.isEmpty else { return }
            slice.sort { $0.tid < $1.tid }
            var size = 0
            for i in slice.indices {
                slice[i].set.optimize()
                size += slice[i].set.chunkSize
            }
            let block = Block(byteCount: size)
            block.keys.reserveCapacity(slice.count)
            block.slots.reserveCapacity(slice.count)
            block.ends.reserveCapacity(slice.count)
            var end = 0
            for i in slice.indices {
                end += slice[i].set.writeChunk(into: UnsafeMutableRawBufferPointer(rebasing: block.bytes[end...]))
                block.keys.append(ProjectionWriter.ChunkKey(pid: pid, topic: slice[i].tid, high: high))
                block.slots.append(slice[i].slot)
                block.ends.append(end)
            }
            slice.removeAll(keepingCapacity: true)
            try hand(block)
        }
        try input.lists.read { lists in
            for project in input.projects {
                pid = project.pid
                high = 0
                try inversion.invert(ordinalCount: project.memberSlots.count, list: { ordinal, body in
                    let s = project.memberSlots[Int(ordinal)]
                    if s != 0 { try lists.withList(at: Int(s) - 1, body) }
                }, index: { tid in
                    guard let s = topicSlots.value(project.pid, tid), s != 0 else {
                        throw ProjectionCorruption(place: "topics/\(project.pid)/\(tid)", reason: "membership of a missing topic")
                    }
                    return Int(s) - 1
                }, emit: { tid, slot, chunkHigh, lows in
                    if chunkHigh != high {
                        try handSlice()
                        high = chunkHigh
                    }
                    slice.append((tid, Int32(slot), PostingSet(high: chunkHigh, sortedLows: lows)))
                })
                try handSlice()
            }
        }
    }
}
