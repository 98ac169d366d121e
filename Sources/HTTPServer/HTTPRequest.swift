/// One request, with its whole body read (up to the server's body limit).
public struct HTTPRequest: Sendable {
    /// `GET`, `POST`, … as the client sent it.
    public var method: String
    /// The path without the query string, percent-decoded.
    public var path: String
    /// The path as sent, escapes and all: a `%2F` there is a slash inside a segment.
    public var rawPath: String
    /// `HTTP/1.1` or `HTTP/1.0`.
    public var version: String
    public var headers: HTTPHeaders
    /// Query arguments in order, decoded (`+` is a space, `%2B` a plus).
    public var query: [(name: String, value: String)]
    public var body: [UInt8]
    /// The peer's address, e.g. `127.0.0.1` or `::1`.
    public var remoteAddress: String

    public init(method: String, path: String, rawPath: String? = nil, version: String = "HTTP/1.1", headers: HTTPHeaders = HTTPHeaders(),
                query: [(name: String, value: String)] = [], body: [UInt8] = [], remoteAddress: String = "") {
        self.method = method
        self.path = path
        self.rawPath = rawPath ?? path
        self.version = version
        self.headers = headers
        self.query = query
        self.body = body
        self.remoteAddress = remoteAddress
    }

    /// The last value of query argument `name`.
    public func queryValue(_ name: String) -> String? { query.last { $0.name == name }?.value }

    /// Every value of query argument `name`.
    public func queryValues(_ name: String) -> [String] { query.filter { $0.name == name }.map(\.value) }
}
