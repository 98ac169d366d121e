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
      "TopicCode": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z0-9._~@/+=#-]{1,128}$",
        "description": "1 to 128 ASCII letters, digits and . _ ~ @ / + = # -"},
      "DeviceID": {"type": "string", "minLength": 1, "maxLength": 256,
        "pattern": "^[^\\u0000-\\u001F\\u007F-\\u009F]*[^\\s\\u0000-\\u001F\\u007F-\\u009F\\u200B\\u200E\\uFEFF][^\\u0000-\\u001F\\u007F-\\u009F]*$",
        "description": "1 to 256 bytes of UTF-8, not blank, with no control characters"},
      "Token": {"type": "string", "minLength": 1, "maxLength": 500, "pattern": "^[!-~]{1,500}$",
        "description": "1 to 500 printable ASCII characters without spaces"},
      "TopicCodeList": {"type": "string", "pattern": "^[A-Za-z0-9._~@/+=#-]{1,128}(,[A-Za-z0-9._~@/+=#-]{1,128})*$",
        "description": "topic codes separated by commas"},
      "Topic": {"oneOf": [
        {"$ref": "#/components/schemas/TopicCode"},
        {"type": "object", "required": ["code"], "properties": {
          "code": {"$ref": "#/components/schemas/TopicCode"},
          "title": {"type": "string", "maxLength": 256},
          "single": {"oneOf": [{"type": "boolean"}, {"type": "integer", "enum": [0, 1]}, {"type": "string", "enum": ["true", "false", "0", "1"]}]}}}]},
      "Topics": {"oneOf": [
        {"type": "array", "minItems": 1, "maxItems": 100, "items": {"$ref": "#/components/schemas/Topic"}},
        {"type": "string", "description": "a JSON array of topics, as a string"}]},
      "TokenBody": {"type": "object", "required": ["device_id", "token", "platform"], "properties": {
        "device_id": {"$ref": "#/components/schemas/DeviceID"},
        "token": {"$ref": "#/components/schemas/Token"},
        "platform": {"type": "string", "enum": ["ios", "android", "and"]}}},
      "RegisterBody": {"type": "object", "required": ["device_id", "topics"], "properties": {
        "device_id": {"$ref": "#/components/schemas/DeviceID"},
        "topics": {"$ref": "#/components/schemas/Topics"}}},
      "UnregisterAllBody": {"type": "object", "required": ["device_id"], "properties": {
        "device_id": {"$ref": "#/components/schemas/DeviceID"}}},
      "AudienceQuery": {"type": "object", "description": "topics (any of) or expr, not both",
        "oneOf": [{"required": ["topics"], "properties": {"topics": {"minItems": 1}}}, {"required": ["expr"]}], "properties": {
        "topics": {"type": "array", "maxItems": 1000, "items": {"$ref": "#/components/schemas/TopicCode"}},
        "expr": {"type": "string", "example": "(sport OR news) AND NOT user.12"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 10000},
        "cursor": {"type": "string"}}},
      "AudienceCounts": {"type": "object", "properties": {
        "project": {"type": "string"}, "asOfSeq": {"type": "integer"}, "total": {"type": "integer"},
        "ios": {"type": "integer"}, "android": {"type": "integer"}, "withoutToken": {"type": "integer"},
        "unknownTopics": {"type": "array", "items": {"type": "string"}}, "expr": {"type": "string"}}},
      "TopicList": {"type": "object", "properties": {
        "project": {"type": "string"}, "asOfSeq": {"type": "integer"},
        "next": {"type": "string", "description": "present when more topics follow: the last code of this page, to pass as after"},
        "topics": {"type": "array", "items": {"type": "object", "properties": {
          "code": {"type": "string"}, "title": {"type": "string"}, "single": {"type": "boolean"}, "subscribers": {"type": "integer"}}}}}},
      "Device": {"type": "object", "properties": {
        "project": {"type": "string"}, "asOfSeq": {"type": "integer"}, "device_id": {"type": "string"},
        "state": {"type": "string", "enum": ["live", "rejected", "no-token"]},
        "token": {"type": "string", "nullable": true}, "platform": {"type": "string", "nullable": true, "enum": ["ios", "android", null]},
        "rejectedAt": {"type": "integer"}, "topics": {"type": "array", "items": {"type": "string"}}}},
      "Rejection": {"type": "object", "required": ["token", "timestamp"], "properties": {
        "token": {"$ref": "#/components/schemas/Token"},
        "provider": {"type": "string", "enum": ["apns", "fcm"]},
        "timestamp": {"type": "integer", "description": "provider time, ms since 1970 (APNs 410 timestamp; for FCM UNREGISTERED the time the send service got the answer); seconds are accepted"},
        "reason": {"type": "string", "maxLength": 256}}},
      "FeedbackResult": {"type": "object", "properties": {"status_code": {"type": "integer"}, "accepted": {"type": "integer"}, "sequence": {"type": "integer"}}},
      "Button": {"type": "object", "required": ["id", "label", "action"], "properties": {
        "id": {"type": "string", "enum": ["primary", "secondary"]}, "label": {"type": "string"},
        "action": {"type": "string", "enum": ["open_screen", "open_url", "close"]}, "url": {"type": "string"}}},
      "Payload": {"type": "object", "additionalProperties": false, "description": "body is required unless loc_key is given or the push is silent; both platform renderings must fit in 4096 bytes", "properties": {
        "title": {"type": "string"}, "subtitle": {"type": "string"}, "body": {"type": "string"}, "badge": {"type": "integer"}, "sound": {"type": "string"},
        "title_loc_key": {"type": "string"}, "title_loc_args": {"type": "array", "items": {"type": "string"}},
        "loc_key": {"type": "string"}, "loc_args": {"type": "array", "items": {"type": "string"}},
        "action_loc_key": {"type": "string"}, "launch_image": {"type": "string"},
        "mutable_content": {"type": "boolean"}, "content_available": {"type": "boolean"}, "category": {"type": "string"},
        "thread_id": {"type": "string"}, "collapse_id": {"type": "string"}, "expiration_at": {"type": "integer", "description": "seconds since 1970"},
        "custom": {"type": "object"}, "campaign_id": {"type": "string"}, "image_url": {"type": "string"}, "thumbnail_url": {"type": "string"},
        "deep_link": {"type": "string"}, "buttons": {"type": "array", "maxItems": 2, "items": {"$ref": "#/components/schemas/Button"}},
        "channel_id": {"type": "string"}, "silent": {"type": "boolean"}, "inapp": {"type": "boolean"},
        "priority": {"type": "string", "enum": ["normal", "high"]}}},
      "SendBody": {"type": "object", "required": ["payload"], "additionalProperties": false, "description": "topics (any of) or expr, not both; any other key is refused (422)",
        "oneOf": [{"required": ["topics"], "properties": {"topics": {"minItems": 1}}}, {"required": ["expr"]}], "properties": {
        "topics": {"type": "array", "maxItems": 1000, "items": {"oneOf": [{"$ref": "#/components/schemas/TopicCode"}, {"type": "object", "required": ["code"], "properties": {"code": {"$ref": "#/components/schemas/TopicCode"}}}]}},
        "expr": {"type": "string", "example": "(news OR sport) AND NOT user.12"},
        "payload": {"$ref": "#/components/schemas/Payload"}}},
      "SendAccepted": {"type": "object", "properties": {
        "notificationId": {"type": "string"}, "status": {"type": "string", "enum": ["accepted"]},
        "message": {"type": "string", "example": "Notification queued for processing"},
        "asOfSeq": {"type": "integer"}, "totalDevices": {"type": "integer"}, "unknownTopics": {"type": "array", "items": {"type": "string"}}}},
      "NotificationStatus": {"type": "object", "properties": {
        "id": {"type": "string"}, "projectId": {"type": "integer"}, "project": {"type": "string"},
        "status": {"type": "string", "enum": ["queued", "processing", "completed"]},
        "createdAt": {"type": "integer"}, "updatedAt": {"type": "integer"}, "completedAt": {"type": "integer", "nullable": true},
        "priority": {"type": "string"}, "topics": {"type": "array", "items": {"type": "string"}}, "expr": {"type": "string"},
        "notification": {"$ref": "#/components/schemas/Payload"}, "asOfSeq": {"type": "integer"},
        "totalDevices": {"type": "integer"}, "sentCount": {"type": "integer"}, "failedCount": {"type": "integer"},
        "iosCount": {"type": "integer"}, "androidCount": {"type": "integer"},
        "failures": {"type": "object", "additionalProperties": {"type": "integer"}}, "rejectedTokens": {"type": "integer"},
        "opens": {"type": "integer"}, "buttonOpens": {"type": "object", "additionalProperties": {"type": "integer"}}}},
      "OpenBody": {"type": "object", "required": ["device_id"], "properties": {
        "device_id": {"$ref": "#/components/schemas/DeviceID"}, "button": {"type": "string", "enum": ["primary", "secondary"]}}},
      "OpenResult": {"type": "object", "properties": {"status_code": {"type": "integer"}, "counted": {"type": "boolean", "description": "false when this (device, button) was already counted, or the notification was not addressed to the device (not in its audience with a live token at asOfSeq)"}}}
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
          {"name": "topics", "in": "query", "schema": {"$ref": "#/components/schemas/TopicCodeList"}, "description": "comma-separated topic codes (or repeat the parameter)"},
          {"name": "expr", "in": "query", "schema": {"type": "string"}, "description": "an audience expression"}],
        "responses": {"200": {"description": "Counts", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AudienceCounts"}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}}},
      "post": {"summary": "Audience counts (query in a JSON body)", "security": [{"projectKey": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AudienceQuery"}}}},
        "responses": {"200": {"description": "Counts", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AudienceCounts"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}}}},
    "/v1/audience": {
      "get": {"summary": "One page of reachable recipients as NDJSON {device_id, platform, token}", "security": [{"projectKey": []}],
        "parameters": [
          {"name": "topics", "in": "query", "schema": {"$ref": "#/components/schemas/TopicCodeList"}},
          {"name": "expr", "in": "query", "schema": {"type": "string"}},
          {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 1000}, "description": "1 to the server's audiencePageLimit (10000 unless configured); without it, 1000 or audiencePageLimit when smaller"},
          {"name": "cursor", "in": "query", "schema": {"type": "string"}, "description": "X-Next-Cursor of the previous page"}],
        "responses": {"200": {"description": "A page; X-Next-Cursor is absent on the last one", "headers": {
            "X-Next-Cursor": {"schema": {"type": "string"}}, "X-As-Of-Seq": {"schema": {"type": "integer"}},
            "X-Walk-As-Of-Seq": {"schema": {"type": "integer"}}, "X-Page-Count": {"schema": {"type": "integer"}}},
          "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}}},
      "post": {"summary": "One page of recipients (query in a JSON body)", "security": [{"projectKey": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AudienceQuery"}}}},
        "responses": {"200": {"description": "A page", "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}}}},
    "/v1/topics": {"get": {"summary": "One page of the project's topics in code order, with subscriber counts", "security": [{"projectKey": []}],
      "parameters": [{"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 1000}},
                     {"name": "prefix", "in": "query", "schema": {"type": "string"}, "description": "only codes that start with it"},
                     {"name": "after", "in": "query", "schema": {"type": "string"}, "description": "the next of the page before"}],
      "responses": {"200": {"description": "Topics", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TopicList"}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}}}},
    "/v1/devices/{device_id}": {"get": {"summary": "One device: token, platform, state, topics", "security": [{"projectKey": []}],
      "parameters": [{"name": "device_id", "in": "path", "required": true, "schema": {"type": "string"}}],
      "responses": {"200": {"description": "The device", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Device"}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "404": {"$ref": "#/components/responses/NotFound"}, "429": {"$ref": "#/components/responses/TooMany"}}}},
    "/v1/feedback": {"post": {"summary": "Provider feedback: a token was rejected (APNs 410 Unregistered, FCM UNREGISTERED)", "security": [{"projectKey": []}],
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"oneOf": [{"$ref": "#/components/schemas/Rejection"}, {"type": "array", "minItems": 1, "maxItems": 1000, "items": {"$ref": "#/components/schemas/Rejection"}}]}}}},
      "responses": {"200": {"description": "Durable", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FeedbackResult"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "413": {"$ref": "#/components/responses/TooLarge"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}}}},
    "/api/send": {"post": {"summary": "Queue a notification to topics or an audience expression (server key); answered once durable, pinned to its audience snapshot", "security": [{"projectKey": []}],
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SendBody"}}}},
      "responses": {"200": {"description": "Durably queued", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SendAccepted"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "413": {"$ref": "#/components/responses/TooLarge"}, "422": {"$ref": "#/components/responses/Invalid"}, "429": {"$ref": "#/components/responses/TooMany"}}}},
    "/api/notifications/{id}": {"get": {"summary": "A notification's status and counts (server key)", "security": [{"projectKey": []}],
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
      "responses": {"200": {"description": "The status document", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NotificationStatus"}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}, "403": {"$ref": "#/components/responses/Forbidden"}, "404": {"$ref": "#/components/responses/NotFound"}}}},
    "/api/notifications/{id}/opens": {"post": {"summary": "An app reports that a notification (or one of its buttons) was opened; each (device, button) counts once", "security": [{"projectKey": []}],
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OpenBody"}}}},
      "responses": {"200": {"description": "Recorded", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OpenResult"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "404": {"$ref": "#/components/responses/NotFound"}, "422": {"$ref": "#/components/responses/Invalid"}}}},
    "/healthz": {"get": {"summary": "Liveness and the last log sequence", "responses": {"200": {"description": "Serving", "content": {"application/json": {"schema": {"type": "object", "properties": {"status": {"type": "string"}, "lastSequence": {"type": "integer"}}}}}}, "503": {"$ref": "#/components/responses/Unavailable"}}}},
    "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "Text exposition format 0.0.4", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    "/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3", "content": {"application/json": {"schema": {"type": "object"}}}}}}}
  }
}
"""#
}
