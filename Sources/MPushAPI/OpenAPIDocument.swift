/// The OpenAPI 3 description of the whole API, served at `/openapi.json`.
enum OpenAPIDocument {
    static let json = #"""
{
  "openapi": "3.0.3",
  "info": {
    "title": "topicstore",
    "version": "1.0.0",
    "description": "MPush v2 compatible membership API for the MPush SDKs, and an audience API for send services. Every response body is a JSON object (NDJSON for /v1/audience, Prometheus text for /metrics)."
  },
  "servers": [{"url": "http://127.0.0.1:8080"}],
  "components": {
    "securitySchemes": {
      "projectKey": {"type": "apiKey", "in": "header", "name": "X-MPush-Token", "description": "A client key (membership endpoints) or a server key (everything) of one project."}
    },
    "parameters": {
      "version": {"name": "X-MPush-Version", "in": "header", "required": false, "schema": {"type": "string", "example": "2"}, "description": "Accepted and ignored."}
    },
    "schemas": {
      "Success": {"type": "object", "required": ["status_code"], "properties": {"status_code": {"type": "integer", "enum": [0]}}},
      "Message": {"type": "object", "required": ["message"], "properties": {"message": {"type": "string"}}},
      "Invalid": {"type": "object", "required": ["message", "errors"], "properties": {
        "message": {"type": "string", "example": "The given data was invalid."},
        "errors": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}}}},
      "Topic": {"oneOf": [
        {"type": "string", "description": "a topic code"},
        {"type": "object", "required": ["code"], "properties": {
          "code": {"type": "string", "maxLength": 128},
          "title": {"type": "string", "maxLength": 256},
          "single": {"oneOf": [{"type": "boolean"}, {"type": "integer", "enum": [0, 1]}, {"type": "string", "enum": ["true", "false", "0", "1"]}]}}}]},
      "Topics": {"oneOf": [
        {"type": "array", "minItems": 1, "maxItems": 100, "items": {"$ref": "#/components/schemas/Topic"}},
        {"type": "string", "description": "a JSON array of topics, as a string"}]},
      "TokenBody": {"type": "object", "required": ["device_id", "token", "platform"], "properties": {
        "device_id": {"type": "string", "minLength": 1, "maxLength": 256},
        "token": {"type": "string", "minLength": 1, "maxLength": 4096},
        "platform": {"type": "string", "enum": ["ios", "android", "and"]}}},
      "RegisterBody": {"type": "object", "required": ["device_id", "topics"], "properties": {
        "device_id": {"type": "string", "minLength": 1, "maxLength": 256},
        "topics": {"$ref": "#/components/schemas/Topics"}}},
      "UnregisterAllBody": {"type": "object", "required": ["device_id"], "properties": {
        "device_id": {"type": "string", "minLength": 1, "maxLength": 256}}},
      "AudienceQuery": {"type": "object", "properties": {
        "topics": {"type": "array", "items": {"type": "string"}},
        "expr": {"type": "string", "example": "(sport OR news) AND NOT user.12"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 10000},
        "cursor": {"type": "string"}}},
      "AudienceCounts": {"type": "object", "properties": {
        "project": {"type": "string"}, "asOfSeq": {"type": "integer"}, "total": {"type": "integer"},
        "ios": {"type": "integer"}, "android": {"type": "integer"}, "withoutToken": {"type": "integer"},
        "unknownTopics": {"type": "array", "items": {"type": "string"}}, "expr": {"type": "string"}}},
      "TopicList": {"type": "object", "properties": {
        "project": {"type": "string"}, "asOfSeq": {"type": "integer"},
        "topics": {"type": "array", "items": {"type": "object", "properties": {
          "code": {"type": "string"}, "title": {"type": "string"}, "single": {"type": "boolean"}, "subscribers": {"type": "integer"}}}}}},
      "Device": {"type": "object", "properties": {
        "project": {"type": "string"}, "asOfSeq": {"type": "integer"}, "device_id": {"type": "string"},
        "state": {"type": "string", "enum": ["live", "rejected", "no-token"]},
        "token": {"type": "string", "nullable": true}, "platform": {"type": "string", "nullable": true, "enum": ["ios", "android", null]},
        "rejectedAt": {"type": "integer"}, "topics": {"type": "array", "items": {"type": "string"}}}},
      "Rejection": {"type": "object", "required": ["token", "timestamp"], "properties": {
        "token": {"type": "string"},
        "provider": {"type": "string", "enum": ["apns", "fcm"]},
        "timestamp": {"type": "integer", "description": "provider time, ms since 1970 (APNs 410 timestamp; for FCM UNREGISTERED the time the send service got the answer); seconds are accepted"},
        "reason": {"type": "string", "maxLength": 256}}},
      "FeedbackResult": {"type": "object", "properties": {"status_code": {"type": "integer"}, "accepted": {"type": "integer"}, "sequence": {"type": "integer"}}}
    },
    "responses": {
      "Success": {"description": "Durable: committed to the log before the answer.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Success"}}}},
      "BadRequest": {"description": "Malformed body (not JSON, not UTF-8, not an object).", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}}},
      "Unauthorized": {"description": "No key, or an unknown or revoked one.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}}},
      "Forbidden": {"description": "A client key on a server endpoint.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}}},
      "NotFound": {"description": "No such resource.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}}},
      "MethodNotAllowed": {"description": "Wrong method; see Allow.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}}},
      "NotAcceptable": {"description": "Accept excludes JSON.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}}},
      "TooLarge": {"description": "Body over the limit (1 MiB by default).", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}}},
      "Invalid": {"description": "Validation failed.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Invalid"}}}},
      "TooMany": {"description": "Rate limit of the key; see Retry-After.", "headers": {"Retry-After": {"schema": {"type": "integer"}}}, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}}},
      "ServerError": {"description": "Internal error.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}}},
      "Unavailable": {"description": "Shutting down.", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Message"}}}}
    }
  },
  "paths": {
    "/api/tokens": {"post": {"summary": "Give a device a push token and platform", "security": [{"projectKey": []}],
      "parameters": [{"$ref": "#/components/parameters/version"}],
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TokenBody"}}, "application/x-www-form-urlencoded": {"schema": {"$ref": "#/components/schemas/TokenBody"}}}},
      "responses": {"200": {"$ref": "#/components/responses/Success"}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "405": {"$ref": "#/components/responses/MethodNotAllowed"}, "406": {"$ref": "#/components/responses/NotAcceptable"}, "413": {"$ref": "#/components/responses/TooLarge"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}, "500": {"$ref": "#/components/responses/ServerError"}, "503": {"$ref": "#/components/responses/Unavailable"}}}},
    "/api/register": {"post": {"summary": "Subscribe a device to topics (unknown topics are created)", "security": [{"projectKey": []}],
      "parameters": [{"$ref": "#/components/parameters/version"}],
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RegisterBody"}}, "application/x-www-form-urlencoded": {"schema": {"$ref": "#/components/schemas/RegisterBody"}}}},
      "responses": {"200": {"$ref": "#/components/responses/Success"}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "405": {"$ref": "#/components/responses/MethodNotAllowed"}, "406": {"$ref": "#/components/responses/NotAcceptable"}, "413": {"$ref": "#/components/responses/TooLarge"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}, "500": {"$ref": "#/components/responses/ServerError"}, "503": {"$ref": "#/components/responses/Unavailable"}}}},
    "/api/unregister": {"post": {"summary": "Remove a device from topics (unknown topics are ignored)", "security": [{"projectKey": []}],
      "parameters": [{"$ref": "#/components/parameters/version"}],
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RegisterBody"}}, "application/x-www-form-urlencoded": {"schema": {"$ref": "#/components/schemas/RegisterBody"}}}},
      "responses": {"200": {"$ref": "#/components/responses/Success"}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "405": {"$ref": "#/components/responses/MethodNotAllowed"}, "406": {"$ref": "#/components/responses/NotAcceptable"}, "413": {"$ref": "#/components/responses/TooLarge"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}, "500": {"$ref": "#/components/responses/ServerError"}, "503": {"$ref": "#/components/responses/Unavailable"}}}},
    "/api/unregister-all": {"post": {"summary": "Remove a device from every topic", "security": [{"projectKey": []}],
      "parameters": [{"$ref": "#/components/parameters/version"}],
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/UnregisterAllBody"}}, "application/x-www-form-urlencoded": {"schema": {"$ref": "#/components/schemas/UnregisterAllBody"}}}},
      "responses": {"200": {"$ref": "#/components/responses/Success"}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "405": {"$ref": "#/components/responses/MethodNotAllowed"}, "406": {"$ref": "#/components/responses/NotAcceptable"}, "413": {"$ref": "#/components/responses/TooLarge"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}, "500": {"$ref": "#/components/responses/ServerError"}, "503": {"$ref": "#/components/responses/Unavailable"}}}},
    "/v1/audience/count": {
      "get": {"summary": "Audience counts for topics (any of) or an expression, from one snapshot", "security": [{"projectKey": []}],
        "parameters": [
          {"name": "topics", "in": "query", "schema": {"type": "string"}, "description": "comma-separated topic codes (or repeat the parameter)"},
          {"name": "expr", "in": "query", "schema": {"type": "string"}, "description": "an audience expression"}],
        "responses": {"200": {"description": "Counts", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AudienceCounts"}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}}},
      "post": {"summary": "Audience counts (query in a JSON body)", "security": [{"projectKey": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AudienceQuery"}}}},
        "responses": {"200": {"description": "Counts", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AudienceCounts"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}}}},
    "/v1/audience": {
      "get": {"summary": "One page of reachable recipients as NDJSON {device_id, platform, token}", "security": [{"projectKey": []}],
        "parameters": [
          {"name": "topics", "in": "query", "schema": {"type": "string"}},
          {"name": "expr", "in": "query", "schema": {"type": "string"}},
          {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 1000}},
          {"name": "cursor", "in": "query", "schema": {"type": "string"}, "description": "X-Next-Cursor of the previous page"}],
        "responses": {"200": {"description": "A page; X-Next-Cursor is absent on the last one", "headers": {
            "X-Next-Cursor": {"schema": {"type": "string"}}, "X-As-Of-Seq": {"schema": {"type": "integer"}},
            "X-Walk-As-Of-Seq": {"schema": {"type": "integer"}}, "X-Page-Count": {"schema": {"type": "integer"}}},
          "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}}},
      "post": {"summary": "One page of recipients (query in a JSON body)", "security": [{"projectKey": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AudienceQuery"}}}},
        "responses": {"200": {"description": "A page", "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}}}},
    "/v1/topics": {"get": {"summary": "The project's topics with subscriber counts", "security": [{"projectKey": []}],
      "responses": {"200": {"description": "Topics", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TopicList"}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "429": {"$ref": "#/components/responses/TooMany"}}}},
    "/v1/devices/{device_id}": {"get": {"summary": "One device: token, platform, state, topics", "security": [{"projectKey": []}],
      "parameters": [{"name": "device_id", "in": "path", "required": true, "schema": {"type": "string"}}],
      "responses": {"200": {"description": "The device", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Device"}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "404": {"$ref": "#/components/responses/NotFound"}, "429": {"$ref": "#/components/responses/TooMany"}}}},
    "/v1/feedback": {"post": {"summary": "Provider feedback: a token was rejected (APNs 410 Unregistered, FCM UNREGISTERED)", "security": [{"projectKey": []}],
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"oneOf": [{"$ref": "#/components/schemas/Rejection"}, {"type": "array", "maxItems": 1000, "items": {"$ref": "#/components/schemas/Rejection"}}]}}}},
      "responses": {"200": {"description": "Durable", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FeedbackResult"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "413": {"$ref": "#/components/responses/TooLarge"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}}}},
    "/healthz": {"get": {"summary": "Liveness and the last log sequence", "responses": {"200": {"description": "Serving", "content": {"application/json": {"schema": {"type": "object", "properties": {"status": {"type": "string"}, "lastSequence": {"type": "integer"}}}}}}, "503": {"$ref": "#/components/responses/Unavailable"}}}},
    "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "Text exposition format 0.0.4", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    "/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3", "content": {"application/json": {"schema": {"type": "object"}}}}}}}
  }
}
"""#
}
