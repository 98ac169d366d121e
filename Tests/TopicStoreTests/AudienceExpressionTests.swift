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

    /// The README allows 64 levels of nesting: 64 parentheses (or NOTs) parse, 65 do not.
    @Test func sixtyFourLevelsOfNestingAreAllowed() throws {
        func parens(_ n: Int) -> String { String(repeating: "(", count: n) + "a" + String(repeating: ")", count: n) }
        func nots(_ n: Int) -> String { String(repeating: "NOT ", count: n) + "a" }
        #expect(AudienceExpression.maxDepth == 64)
        #expect(try AudienceExpression(parsing: parens(64)) == .topic("a"))
        var negated = AudienceExpression.topic("a")
        for _ in 0..<64 { negated = .not(negated) }
        #expect(try AudienceExpression(parsing: nots(64)) == negated)
        // Parentheses and NOT count alike: 32 of each is 64 levels.
        #expect(throws: Never.self) { try AudienceExpression(parsing: String(repeating: "(NOT ", count: 32) + "a" + String(repeating: ")", count: 32)) }
        for past in [parens(65), nots(65), String(repeating: "(NOT ", count: 32) + "(a)" + String(repeating: ")", count: 32)] {
            let error = #expect(throws: AudienceExpression.ParseError.self) { try AudienceExpression(parsing: past) }
            #expect(error?.message == "nested more than 64 levels deep", "\(String(describing: error))")
        }
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
