import Foundation

/// A build's device records in their stored form (`DeviceRecord.encode`), in
/// key order (pid, ordinal), encoded on a thread of their own while the
/// writer puts them (`forEach`), a block at a time.
///
/// At most `blocksHeld` blocks exist, reused as the writer takes them: the
/// whole build encoded at once before it was written took a buffer as large
/// as the device arena (126 MB at 1M devices, 1.3 GB at 10M), fresh pages
/// beside everything else the write holds (on this VM a megabyte first
/// touched costs ~2 ms). The thread starts at once, so the first blocks are
/// ready when the writer comes to the devices table.
final class EncodedDevices: @unchecked Sendable {
    /// Records back to back in `bytes`; `ends[i]` is where record `i` ends,
    /// -1 for a deleted device (which has no bytes).
    private final class Block {
        var keys: [(pid: UInt32, ordinal: UInt32)] = []
        var ends: [Int] = []
        var bytes: UnsafeMutableRawPointer
        var capacity: Int
        var count = 0

        init(capacity: Int) {
            self.capacity = capacity
            bytes = .allocate(byteCount: capacity, alignment: 16)
        }
        deinit { bytes.deallocate() }

        /// Makes room for `needed` bytes in all: a block holding bytes has
        /// room for them (the encoder hands it over first), an empty one grows.
        func fit(_ needed: Int) {
            guard needed > capacity else { return }
            precondition(count == 0, "a block holding records is not grown")
            bytes.deallocate()
            capacity = needed
            bytes = .allocate(byteCount: capacity, alignment: 16)
        }

        func clear() {
            keys.removeAll(keepingCapacity: true)
            ends.removeAll(keepingCapacity: true)
            count = 0
        }
    }

    private let condition = NSCondition()
    /// Under `condition`: blocks encoded and not yet taken (oldest first),
    /// blocks to encode into, and whether the encoder is done or told to stop.
    private var ready: [Block] = []
    private var spare: [Block]
    private var encoded = false
    private var stopped = false
    private var encoder: HelperThread<Void>?

    /// Starts encoding `devices`, which must not change until `forEach` returned.
    /// A block holds `blockBytes` of records (more only for one larger record).
    init(_ devices: BuildDevices, blockBytes: Int = 1 << 20, blocksHeld: Int = 4) {
        spare = (0..<max(blocksHeld, 2)).map { _ in Block(capacity: max(blockBytes, 64)) }
        encoder = HelperThread(name: "build-devices") { [self] in encode(devices) }
    }

    /// The encoding thread: fills a spare block, hands it over, takes the next.
    private func encode(_ devices: BuildDevices) {
        var block: Block? = takeSpare()
        devices.forEachInKeyOrder { pid, ordinal, text in
            guard let current = block else { return }  // stopped: the rest is not wanted
            // A stored record is at most 2 bytes longer than its text form.
            let bound = (text?.count ?? 0) + 2
            if current.count + bound > current.capacity, !current.keys.isEmpty {
                hand(current)
                guard let next = takeSpare() else { block = nil; return }
                block = next
            }
            let b = block!
            b.keys.append((pid, ordinal))
            guard let text else { b.ends.append(-1); return }
            b.fit(b.count + bound)
            b.count += DeviceRecord.encodeStored(textForm: text, into: b.bytes + b.count)
            b.ends.append(b.count)
        }
        condition.changing {
            if let block, !block.keys.isEmpty { ready.append(block) }
            encoded = true
        }
    }

    /// A block to encode into, waiting for the writer to give one back; nil once stopped.
    private func takeSpare() -> Block? {
        condition.waiting(while: { spare.isEmpty && !stopped }) { stopped ? nil : spare.removeLast() }
    }

    private func hand(_ block: Block) {
        condition.changing { ready.append(block) }
    }

    /// Calls `body` with each device's key and stored record (nil for a deleted
    /// device), in key order, as the blocks come. Call it once: when it returns
    /// or throws, the encoding thread has ended.
    func forEach(_ body: (UInt32, UInt32, UnsafeRawBufferPointer?) throws -> Void) throws {
        defer { close() }
        while let block = nextBlock() {
            var start = 0
            for (i, k) in block.keys.enumerated() {
                let end = block.ends[i]
                if end < 0 {
                    try body(k.pid, k.ordinal, nil)
                } else {
                    try body(k.pid, k.ordinal, UnsafeRawBufferPointer(start: block.bytes + start, count: end - start))
                    start = end
                }
            }
            block.clear()
            condition.changing { spare.append(block) }
        }
    }

    /// The oldest encoded block, waiting for it; nil when all were taken.
    private func nextBlock() -> Block? {
        condition.waiting(while: { ready.isEmpty && !encoded }) { ready.isEmpty ? nil : ready.removeFirst() }
    }

    /// Tells the encoder to stop (it may be waiting for a spare block) and
    /// waits for it to end. The starter calls it on every way out, `forEach`
    /// or not: the thread holds this object until it ends.
    func close() {
        condition.changing { stopped = true }
        try? encoder?.join()
        encoder = nil
    }
}
