import Projections
import Testing

@Suite struct AudienceExpressionTests {
    @Test func precedenceAndSyntax() throws {
        #expect(try AudienceExpression(parsing: "news AND NOT user.12") == .and(.topic("news"), .not(.topic("user.12"))))
        #expect(try AudienceExpression(parsing: "(sport OR news) AND platform:ios") == .and(.or(.topic("sport"), .topic("news")), .platform(.ios)))
        #expect(try AudienceExpression(parsing: "a OR b AND c") == .or(.topic("a"), .and(.topic("b"), .topic("c"))))
        #expect(try AudienceExpression(parsing: "a | b & !c") == .or(.topic("a"), .and(.topic("b"), .not(.topic("c")))))
        #expect(try AudienceExpression(parsing: "a && b || c") == .or(.and(.topic("a"), .topic("b")), .topic("c")))
        #expect(try AudienceExpression(parsing: "not not a") == .not(.not(.topic("a"))))
        #expect(try AudienceExpression(parsing: #""and" or devices:all"#) == .or(.topic("and"), .allDevices))
        #expect(try AudienceExpression(parsing: "  project.all  ") == .topic("project.all"))
    }

    @Test(arguments: ["", "a AND", "(a OR b", "a b", "platform:web", "AND a", "a OR )", "\"unterminated", "a:b"])
    func errorsAreReportedWithAPosition(text: String) {
        #expect(throws: AudienceExpression.ParseError.self) { try AudienceExpression(parsing: text) }
    }

    @Test func depthAndLengthAreBounded() {
        #expect(throws: AudienceExpression.ParseError.self) {
            try AudienceExpression(parsing: String(repeating: "(", count: 100) + "a" + String(repeating: ")", count: 100))
        }
        #expect(throws: AudienceExpression.ParseError.self) {
            try AudienceExpression(parsing: Array(repeating: "topic", count: 1000).joined(separator: " OR "))
        }
    }
}
