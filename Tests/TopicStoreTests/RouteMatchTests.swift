@testable import MPushAPI
import Testing

/// A request's path to its route and id, as sent (`Route.match`).
@Suite struct RouteMatchTests {
    @Test func everyPathWithoutAnIdIsItsRoute() {
        for route in Route.allCases where !route.rawValue.contains("{") {
            #expect(Route.match(rawPath: route.rawValue)?.0 == route)
            #expect(Route.match(rawPath: route.rawValue + "/")?.0 == route, "one trailing slash is dropped")
            #expect(Route.match(rawPath: route.rawValue + "//") == nil, "\(route)")
            #expect(Route.match(rawPath: route.rawValue.uppercased()) == nil, "paths are case-sensitive")
            #expect(Route.match(rawPath: route.rawValue + "x") == nil)
            #expect(Route.match(rawPath: route.rawValue)?.1 == nil)
        }
        // Percent-encoded letters are the letters.
        #expect(Route.match(rawPath: "/v1/%74opics")?.0 == .topics)
        #expect(Route.match(rawPath: "/api/regist%65r/")?.0 == .register)
    }

    @Test func pathsWithAnIdNameIt() {
        #expect(Route.match(rawPath: "/v1/devices/D1")! == (.device, "D1"))
        #expect(Route.match(rawPath: "/v1/devices/D%2F1")! == (.device, "D/1"), "%2F is a slash inside the id")
        #expect(Route.match(rawPath: "/v1/devices/{device_id}")! == (.device, "{device_id}"), "a template is an id like any other")
        #expect(Route.match(rawPath: "/v1/devices/") == nil)
        #expect(Route.match(rawPath: "/api/notifications/n1")! == (.notification, "n1"))
        #expect(Route.match(rawPath: "/api/notifications/n1/opens")! == (.notificationOpen, "n1"))
        #expect(Route.match(rawPath: "/api/notifications/n1/opens/")! == (.notificationOpen, "n1"))
        #expect(Route.match(rawPath: "/api/notifications/a/b") == nil)
        #expect(Route.match(rawPath: "/api/notifications/{id}")! == (.notification, "{id}"))
    }

    @Test func otherPathsAreNone() {
        for path in ["", "/", "/api", "/api/", "/v1", "/v1/audience/count/x", "/healthz/x", "/é", "/v1/topics?x=1"] {
            #expect(Route.match(rawPath: path) == nil, "\(path)")
        }
    }
}
