import HTTPServer

/// `application/x-www-form-urlencoded` bodies, as the SDKs and PHP send them:
/// `device_id=D1&topics=%5B%22news%22%5D`, repeated `topics[]=a&topics[]=b`,
/// and nested `topics[0][code]=a&topics[0][single]=1`.
enum FormDecoding {
    struct Malformed: Error {
        var message: String
    }

    /// Decodes the body into the object shape JSON would give: strings,
    /// arrays (`a[]`, or `a[0]`, `a[1]` … with integer keys) and objects.
    static func object(from body: [UInt8]) throws(Malformed) -> [String: Any] {
        var root = Node.object([:], order: [])
        for pair in body.split(separator: 0x26, omittingEmptySubsequences: true) {  // &
            let parts = pair.split(separator: 0x3D, maxSplits: 1, omittingEmptySubsequences: false)  // =
            let name = try decode(parts[0])
            let value = parts.count > 1 ? try decode(parts[1]) : ""
            guard !name.isEmpty else { continue }
            root.insert(path: path(of: name), value: value)
        }
        return root.value as? [String: Any] ?? [:]
    }

    /// `a[b][]` → ["a", "b", ""].
    static func path(of name: String) -> [String] {
        guard let open = name.firstIndex(of: "["), name.hasSuffix("]") else { return [name] }
        var segments = [String(name[..<open])]
        var rest = name[open...]
        while rest.first == "[", let close = rest.firstIndex(of: "]") {
            segments.append(String(rest[rest.index(after: rest.startIndex)..<close]))
            rest = rest[rest.index(after: close)...]
        }
        if !rest.isEmpty { return [name] }  // not bracket syntax after all
        return segments
    }

    /// Percent-decoding with `+` as space; the escapes must be whole and the bytes UTF-8.
    static func decode(_ bytes: ArraySlice<UInt8>) throws(Malformed) -> String {
        let (out, malformed) = PercentDecoding.bytes(bytes, plusIsSpace: true)
        if malformed { throw Malformed(message: "The form body has a malformed percent escape.") }
        guard let s = String(validating: out, as: UTF8.self) else {
            throw Malformed(message: "The form body is not valid UTF-8.")
        }
        return s
    }

    /// A tree of form values, turned into Foundation-style JSON values at the end.
    indirect enum Node {
        case string(String)
        case object([String: Node], order: [String])

        mutating func insert(path: [String], value: String) {
            guard let head = path.first else { self = .string(value); return }
            guard case .object(var children, var order) = self else {
                // A plain value met a nested one with the same name: the nested one wins.
                self = .object([:], order: [])
                insert(path: path, value: value)
                return
            }
            let key = head.isEmpty ? String(order.count) : head  // `a[]` appends
            if children[key] == nil { order.append(key) }
            var child = children[key] ?? .object([:], order: [])
            child.insert(path: Array(path.dropFirst()), value: value)
            children[key] = child
            self = .object(children, order: order)
        }

        var value: Any {
            switch self {
            case .string(let s): return s
            case .object(let children, let order):
                // Keys 0, 1, 2 … make an array.
                let indices = order.compactMap { Int($0) }.sorted()
                if !order.isEmpty, indices.count == order.count, indices == Array(0..<order.count) {
                    return indices.compactMap { children[String($0)]?.value }
                }
                var out: [String: Any] = [:]
                for (k, v) in children { out[k] = v.value }
                return out
            }
        }
    }
}
