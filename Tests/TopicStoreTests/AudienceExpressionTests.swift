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
        // `!!` is two NOTs (only && and || double as one operator), `!!!` three.
        #expect(try AudienceExpression(parsing: "!!news") == .not(.not(.topic("news"))))
        #expect(try AudienceExpression(parsing: "!!!news") == .not(.not(.not(.topic("news")))))
        #expect(try AudienceExpression(parsing: "a &&!!b") == .and(.topic("a"), .not(.not(.topic("b")))))
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

    /// The text an expression is echoed as (`"expr"` in answers, the send's record) parses
    /// back to the same audience, whatever its size: a chain of one operator is one level.
    @Test func theEchoedTextReadsBack() throws {
        let codes = (0..<100).map { "u\($0)" }
        let chain = try #require(AudienceExpression.anyOf(codes))
        #expect(chain.description == "(" + codes.joined(separator: " OR ") + ")")
        #expect(try AudienceExpression(parsing: chain.description).description == chain.description)
        for text in ["a OR b AND c", "(a OR b) AND NOT (c OR d OR e)", "!!a & (b | c | !d)", "NOT (a AND b AND c) OR devices:all"] {
            let e = try AudienceExpression(parsing: text)
            let again = try AudienceExpression(parsing: e.description)
            #expect(again.description == e.description, "\(text)")
        }
        #expect(try AudienceExpression(parsing: "a OR b AND c").description == "(a OR (b AND c))")
        #expect(try AudienceExpression(parsing: "(a AND b) AND (c AND d)").description == "(a AND b AND c AND d)")
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
