/// A data.mdb of 0 bytes. LMDB takes an empty file for a new environment (a
/// writer would write fresh meta pages into it), but an existing empty data.mdb
/// is a store cut to nothing, or one whose creation died before its first write:
/// the environment refuses it and leaves it as it is.
public struct EmptyDataFile: Error, Sendable, CustomStringConvertible {
    /// The file (`DIR/data.mdb`).
    public let file: String
    public var description: String { "\(file) is empty (0 bytes)" }
}
