#!/usr/bin/env python3
"""Fake APNs + FCM (HTTP/2 over TLS) for topicstore's send tests and benchmark.

One listener serves:
  POST /3/device/<token>                        APNs (bearer ES256 JWT checked against --apns-public)
  POST /v1/projects/<p>/messages:send           FCM HTTP v1 (bearer access token issued by /token)
  POST /token                                   OAuth2 JWT-bearer exchange (RS256 assertion checked against --fcm-public)
  GET  /stats                                   {"requests": n, "byStatus": {...}}

The answer depends on the device token's prefix:
  gone…   APNs 410 {"reason":"Unregistered","timestamp":<now in ms>}
  stale…  APNs 410 {"reason":"Unregistered","timestamp":<an hour ago>} (older than the token's registration)
  bad…    APNs 400 {"reason":"BadDeviceToken"}
  unreg…  FCM 404 NOT_FOUND / UNREGISTERED
  invalid… FCM 400 INVALID_ARGUMENT on message.token
  busy…   429 with Retry-After: 1 the first time, then 200
  err…    500 the first time, then 200
  down…   always 500
  anything else: 200
Every request is appended to --log as one JSON line (unless --no-log).
--max-streams N announces SETTINGS_MAX_CONCURRENT_STREAMS N (h2 drops a connection that opens more);
--goaway-after N answers N requests per connection, then sends GOAWAY and closes it.
--close-after N closes a connection after N answers, without GOAWAY.
--plain speaks HTTP/2 without TLS (prior knowledge), for http:// URLs.
--no-settings completes TLS (ALPN h2) and then sends nothing, not even its SETTINGS (a stuck provider).
--refuse-all answers every request with RST_STREAM REFUSED_STREAM (a provider that takes nothing),
  logged with status 0.
--token-fail N answers the first N token exchanges (POST /token) 503 (a transient OAuth2 outage).

--workers N runs N processes that each accept on the same port (SO_REUSEPORT: the kernel spreads
connections over them), for benchmarks; an access token issued by one worker is good at every
other (HMAC of a secret made before the fork). What is remembered per token (the first 429/500)
and /stats are per worker, so the tests use one worker.
"""
import argparse, asyncio, base64, hashlib, hmac, json, os, secrets, signal, socket, ssl, sys, time, itertools

import h2.config, h2.connection, h2.errors, h2.events, h2.settings
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


def b64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class State:
    def __init__(self, args):
        self.args = args
        self.apns_key = serialization.load_pem_public_key(open(args.apns_public, "rb").read()) if args.apns_public else None
        self.fcm_key = serialization.load_pem_public_key(open(args.fcm_public, "rb").read()) if args.fcm_public else None
        self.good_jwts = set()
        self.secret = args.secret
        self.seen = {}
        self.requests = 0
        self.by_status = {}
        self.token_exchanges = 0
        self.log = None if args.no_log else open(args.log, "a", buffering=1)
        self.counter = itertools.count(1)

    def verify_jwt(self, jwt, key, alg):
        if jwt in self.good_jwts:
            return json.loads(b64url(jwt.split(".")[1]))
        try:
            h, c, s = jwt.split(".")
            header = json.loads(b64url(h))
            if header.get("alg") != alg:
                return None
            sig = b64url(s)
            data = (h + "." + c).encode()
            if alg == "ES256":
                if len(sig) != 64:
                    return None
                der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
                key.verify(der, data, ec.ECDSA(hashes.SHA256()))
            else:
                key.verify(sig, data, padding.PKCS1v15(), hashes.SHA256())
            claims = json.loads(b64url(c))
            claims["_header"] = header
            self.good_jwts.add(jwt)
            return claims
        except Exception:
            return None

    def mac(self, text):
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()[:32]

    def good_access_token(self, tok):
        if not tok.startswith("ya29.fake-"):
            return False
        n, _, mac = tok[len("ya29.fake-"):].partition(".")
        return hmac.compare_digest(mac, self.mac(n))

    def first_time(self, token):
        n = self.seen.get(token, 0)
        self.seen[token] = n + 1
        return n == 0

    def handle(self, method, path, headers, body):
        """Returns (status, extra headers, body bytes)."""
        auth = headers.get("authorization", "")
        if path == "/stats":
            return 200, [], json.dumps({"requests": self.requests, "byStatus": self.by_status,
                                        "tokenExchanges": self.token_exchanges}).encode()
        if path == "/token" and method == "POST":
            if self.args.token_fail > 0:
                self.args.token_fail -= 1
                self.token_exchanges += 1
                return 503, [], b'{"error":"temporarily_unavailable"}'
            form = dict(p.split("=", 1) for p in body.decode().split("&") if "=" in p)
            claims = self.verify_jwt(form.get("assertion", ""), self.fcm_key, "RS256") if self.fcm_key else None
            if form.get("grant_type") != "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer" or not claims \
                    or claims.get("scope") != "https://www.googleapis.com/auth/firebase.messaging":
                return 400, [], b'{"error":"invalid_grant","error_description":"Invalid JWT Signature."}'
            self.token_exchanges += 1
            n = "%d-%d" % (os.getpid(), next(self.counter))
            tok = "ya29.fake-%s.%s" % (n, self.mac(n))
            return 200, [], json.dumps({"access_token": tok, "expires_in": 3599, "token_type": "Bearer"}).encode()
        if path.startswith("/3/device/"):
            token = path[len("/3/device/"):]
            claims = self.verify_jwt(auth[len("bearer "):], self.apns_key, "ES256") if auth.lower().startswith("bearer ") and self.apns_key else None
            if not claims or abs(time.time() - claims.get("iat", 0)) > 3600:
                return 403, [], b'{"reason":"InvalidProviderToken"}'
            if "apns-topic" not in headers:
                return 400, [], b'{"reason":"MissingTopic"}'
            return self.answer("apns", token)
        if path.startswith("/v1/projects/") and path.endswith("/messages:send"):
            if not auth.startswith("Bearer ") or not (auth[7:] in self.good_jwts or self.good_access_token(auth[7:])):
                return 401, [], b'{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}'
            self.good_jwts.add(auth[7:])
            # The sender writes {"message":{"token":"…",…}: take the token without a full parse (the hot path);
            # anything else is parsed properly.
            token = None
            if body.startswith(b'{"message":{"token":"'):
                end = body.find(b'"', 21)
                if end > 21 and body.find(b'\\', 21, end) < 0:
                    token = body[21:end].decode()
            if token is None:
                try:
                    token = json.loads(body)["message"]["token"]
                except Exception:
                    return 400, [], b'{"error":{"code":400,"message":"Invalid JSON payload received.","status":"INVALID_ARGUMENT"}}'
            return self.answer("fcm", token)
        return 404, [], b'{"reason":"NotFound"}'

    def answer(self, provider, token):
        apns = provider == "apns"
        def err(status, apns_reason, fcm_status, fcm_code=None, extra=None, headers=()):
            if apns:
                return status, list(headers), json.dumps({"reason": apns_reason, **(extra or {})}).encode()
            details = [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": fcm_code or fcm_status}]
            return status, list(headers), json.dumps({"error": {"code": status, "message": apns_reason, "status": fcm_status, "details": details}}).encode()
        if token.startswith("gone") and apns:
            # The time (ms) APNs learnt the token was invalid: now, so it is newer than the token's registration.
            return 410, [], json.dumps({"reason": "Unregistered", "timestamp": int(time.time() * 1000)}).encode()
        if token.startswith("stale") and apns:
            # APNs learnt the token was invalid an hour ago: before the token was registered, so stale.
            return 410, [], json.dumps({"reason": "Unregistered", "timestamp": int(time.time() * 1000) - 3_600_000}).encode()
        if token.startswith("bad") and apns:
            return 400, [], b'{"reason":"BadDeviceToken"}'
        if token.startswith("unreg") and not apns:
            return err(404, "Requested entity was not found.", "NOT_FOUND", "UNREGISTERED")
        if token.startswith("invalid") and not apns:
            body = {"error": {"code": 400, "message": "The registration token is not a valid FCM registration token",
                              "status": "INVALID_ARGUMENT", "details": [
                                  {"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "INVALID_ARGUMENT"},
                                  {"@type": "type.googleapis.com/google.rpc.BadRequest",
                                   "fieldViolations": [{"field": "message.token", "description": "Invalid registration token"}]}]}}
            return 400, [], json.dumps(body).encode()
        if token.startswith("busy") and self.first_time(token):
            return err(429, "TooManyRequests", "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", headers=[("retry-after", "1")])
        if token.startswith("err") and self.first_time(token):
            return err(500, "InternalServerError", "INTERNAL")
        if token.startswith("down"):
            return err(500, "InternalServerError", "INTERNAL")
        if apns:
            return 200, [("apns-id", "00000000-0000-0000-0000-%012d" % next(self.counter))], b""
        return 200, [], b'{"name":"projects/fake/messages/%d"}' % next(self.counter)


class SilentProtocol(asyncio.Protocol):
    """--no-settings: the TLS handshake (ALPN h2) completes, then nothing is ever sent."""
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        pass


class H2Protocol(asyncio.Protocol):
    def __init__(self, state):
        self.state = state
        # Header validation and normalisation are much of h2's cost per stream; curl sends valid headers.
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding="utf-8", validate_inbound_headers=False,
            validate_outbound_headers=False, normalize_inbound_headers=False, normalize_outbound_headers=False))
        self.streams = {}
        self.answered = 0
        self.closing = False

    def connection_made(self, transport):
        self.transport = transport
        self.conn.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.state.args.max_streams,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
        self.conn.initiate_connection()
        self.conn.increment_flow_control_window(1 << 24)
        self.transport.write(self.conn.data_to_send())

    def data_received(self, data):
        if self.closing:
            return
        try:
            events = self.conn.receive_data(data)
        except Exception:
            self.transport.close()
            return
        for ev in events:
            if isinstance(ev, h2.events.RequestReceived):
                if self.state.args.refuse_all:
                    self.conn.reset_stream(ev.stream_id, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
                    if self.state.log:
                        self.state.log.write(json.dumps({"path": dict(ev.headers).get(":path"), "status": 0, "t": time.time(),
                                                         "headers": {}, "body": "", "response": "REFUSED_STREAM"}) + "\n")
                    continue
                self.streams[ev.stream_id] = (dict(ev.headers), bytearray())
            elif isinstance(ev, h2.events.DataReceived):
                s = self.streams.get(ev.stream_id)
                if s is not None:
                    s[1].extend(ev.data)
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                if not self.closing and ev.stream_id in self.streams:
                    self.respond(ev.stream_id)
                    self.answered += 1
                    if self.state.args.close_after and self.answered >= self.state.args.close_after:
                        # A connection lost without a word (a crashed server, a middlebox): the answers
                        # so far go out, then the socket closes with the client's data unread (a reset).
                        self.closing = True
                        break
                    goaway_after = self.state.args.goaway_after
                    if goaway_after and self.answered >= goaway_after:
                        # Graceful shutdown as a server restarting does it: GOAWAY naming the last stream
                        # answered (the client must retry the later ones elsewhere), then close.
                        self.conn.close_connection(last_stream_id=ev.stream_id)
                        self.closing = True
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.transport.close()
        out = self.conn.data_to_send()
        if out:
            self.transport.write(out)
        if self.closing:
            self.transport.close()

    def respond(self, stream_id):
        headers, body = self.streams.pop(stream_id)
        st = self.state
        method, path = headers.get(":method"), headers.get(":path")
        status, extra, out = st.handle(method, path, headers, bytes(body))
        if path != "/stats":
            st.requests += 1
            st.by_status[str(status)] = st.by_status.get(str(status), 0) + 1
            if st.log:
                st.log.write(json.dumps({"path": path, "status": status, "t": time.time(),
                                         "headers": {k: v for k, v in headers.items() if not k.startswith(":")},
                                         "body": body.decode("utf-8", "replace"),
                                         "response": out.decode("utf-8", "replace")}) + "\n")
        delay = st.args.delay_ms / 1000.0
        def send(flush):
            try:
                self.conn.send_headers(stream_id, [(":status", str(status)), ("content-length", str(len(out)))] + extra,
                                       end_stream=not out)
                if out:
                    self.conn.send_data(stream_id, out, end_stream=True)
                if flush:
                    self.transport.write(self.conn.data_to_send())
            except Exception:
                pass
        if delay > 0:
            asyncio.get_event_loop().call_later(delay, send, True)
        else:
            send(False)  # data_received writes everything it produced at once


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--apns-public")
    p.add_argument("--fcm-public")
    p.add_argument("--log", default="/dev/null")
    p.add_argument("--no-log", action="store_true")
    p.add_argument("--delay-ms", type=float, default=0)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--plain", action="store_true", help="HTTP/2 in clear text (prior knowledge) instead of TLS")
    p.add_argument("--max-streams", type=int, default=1000, help="SETTINGS_MAX_CONCURRENT_STREAMS announced")
    p.add_argument("--close-after", type=int, default=0, help="close a connection (no GOAWAY) after N answers (0: never)")
    p.add_argument("--goaway-after", type=int, default=0, help="send GOAWAY and close a connection after N answers (0: never)")
    p.add_argument("--no-settings", action="store_true", help="complete TLS, then send nothing (no SETTINGS)")
    p.add_argument("--refuse-all", action="store_true", help="refuse every stream (RST_STREAM REFUSED_STREAM)")
    p.add_argument("--token-fail", type=int, default=0, help="answer the first N token exchanges 503")
    args = p.parse_args()
    args.secret = secrets.token_bytes(32)
    return args


def listener(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
    s.listen(1024)  # before "listening" is printed: no connection is refused
    return s


async def serve(args, sock, announce):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(args.cert, args.key)
    ctx.set_alpn_protocols(["h2"])
    state = State(args)
    loop = asyncio.get_running_loop()
    server = await loop.create_server((lambda: SilentProtocol()) if args.no_settings else (lambda: H2Protocol(state)), sock=sock, ssl=None if args.plain else ctx, backlog=1024)
    if announce:
        print("listening %d" % sock.getsockname()[1], flush=True)
    # Stops by itself when its parent goes away (stdin closes).
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await reader.read()
    server.close()


def main():
    args = parse_args()
    first = listener(args.port)
    port = first.getsockname()[1]
    if args.workers <= 1:
        asyncio.run(serve(args, first, True))
        return
    # Each worker listens on its own SO_REUSEPORT socket of the same port; the kernel
    # spreads new connections over them. They all read the same stdin, so all stop when it closes.
    children = []
    for i in range(args.workers):
        sock = first if i == 0 else listener(port)
        pid = os.fork()
        if pid == 0:
            try:
                asyncio.run(serve(args, sock, False))
            finally:
                os._exit(0)
        sock.close()
        children.append(pid)
    print("listening %d" % port, flush=True)
    try:
        for pid in children:
            os.waitpid(pid, 0)
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


if __name__ == "__main__":
    main()
