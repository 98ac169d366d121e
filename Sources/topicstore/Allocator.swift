import CTCMalloc

/// The allocator this process runs on. The executable links tcmalloc (Debian's
/// gperftools), which replaces glibc's malloc for the whole process: a rebuild
/// allocates and frees millions of small strings and arrays, and with glibc
/// that took about a tenth of its time (README, "Why these libraries").
enum Allocator {
    /// For example "gperftools 2.10".
    static var name: String {
        var major: Int32 = 0, minor: Int32 = 0
        var patch: UnsafePointer<CChar>? = nil
        return String(cString: tc_version(&major, &minor, &patch))
    }
}
