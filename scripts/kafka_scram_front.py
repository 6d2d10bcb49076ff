"""Kafka SASL/SCRAM front end for a plain Tansu broker (started by scripts/services.sh).

  python scripts/kafka_scram_front.py --user NAME --password-file FILE \
      --route LISTEN:BROKER [--route ...]

For every client connection it opens one connection to its broker (127.0.0.1:BROKER), answers
the SASL exchange itself the way Apache Kafka does (SaslHandshake, then SaslAuthenticate v0-v2;
mechanisms SCRAM-SHA-256 and SCRAM-SHA-512, RFC 5802 server side), and once the client has
logged in copies bytes both ways unchanged. ApiVersions before the login goes to the broker. Any
other request before the login, an unknown mechanism or a failed login closes the connection,
after the error response Kafka sends (UNSUPPORTED_SASL_MECHANISM 33; SASL_AUTHENTICATION_FAILED
58 with Kafka's message). Not supported: SaslHandshake v0 with bare tokens, re-authentication.
"""

import argparse
import asyncio
import base64
import hashlib
import hmac
import os
import secrets
import signal
import struct
import sys

MECHANISMS = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
ITERATIONS = 4096  # Kafka's minimum for both mechanisms
MAX_FRAME = 512 * 1024  # Kafka's sasl.server.max.receive.size: larger frames before login close
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 33, 58


def log(msg):
    print(f"kafka-scram-front: {msg}", flush=True)


class AuthFailed(Exception):
    pass


def make_credentials(user, password):
    """{(user, mechanism): (salt, iterations, stored_key, server_key)}, as Kafka stores them."""
    creds = {}
    for mech, h in MECHANISMS.items():
        salt = os.urandom(16)
        salted = hashlib.pbkdf2_hmac(h().name, password.encode(), salt, ITERATIONS)
        client_key = hmac.new(salted, b"Client Key", h).digest()
        server_key = hmac.new(salted, b"Server Key", h).digest()
        creds[(user, mech)] = (salt, ITERATIONS, h(client_key).digest(), server_key)
    return creds


def unescape(name):
    return name.replace("=2C", ",").replace("=3D", "=")


class Scram:
    """Server side of one SCRAM exchange (RFC 5802, RFC 7677)."""

    def __init__(self, mechanism, creds):
        self.mech, self.h, self.creds = mechanism, MECHANISMS[mechanism], creds
        self.steps, self.user, self.done = 0, None, False

    def step(self, token):
        try:
            msg = token.decode()
        except UnicodeDecodeError:
            raise AuthFailed("token is not UTF-8") from None
        self.steps += 1
        if self.steps == 1:
            return self.first(msg)
        if self.steps == 2:
            return self.final(msg)
        raise AuthFailed("SASL token after the end of the exchange")

    def first(self, msg):
        parts = msg.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise AuthFailed("bad client-first message (channel binding is not supported)")
        if parts[1] and not parts[1].startswith("a="):
            raise AuthFailed("bad authorization id in the client-first message")
        self.gs2 = f"{parts[0]},{parts[1]},"
        self.bare = parts[2]
        attrs = dict(a.split("=", 1) for a in self.bare.split(",") if "=" in a)
        if "n" not in attrs or "r" not in attrs:
            raise AuthFailed("client-first message without n= or r=")
        self.user = unescape(attrs["n"])
        authzid = unescape(parts[1][2:])
        if authzid and authzid != self.user:
            raise AuthFailed(f"authorization id {authzid!r} is not the user {self.user!r}")
        cred = self.creds.get((self.user, self.mech))
        if cred is None:
            raise AuthFailed(f"unknown user {self.user!r} for {self.mech}")
        self.salt, self.iterations, self.stored_key, self.server_key = cred
        self.nonce = attrs["r"] + secrets.token_urlsafe(18)
        salt = base64.b64encode(self.salt).decode()
        self.server_first = f"r={self.nonce},s={salt},i={self.iterations}"
        return self.server_first.encode()

    def final(self, msg):
        head, sep, proof_b64 = msg.rpartition(",p=")
        if not sep:
            raise AuthFailed("client-final message without a proof")
        attrs = dict(a.split("=", 1) for a in head.split(",") if "=" in a)
        if attrs.get("c") != base64.b64encode(self.gs2.encode()).decode():
            raise AuthFailed("channel binding mismatch")
        if attrs.get("r") != self.nonce:
            raise AuthFailed("nonce mismatch")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise AuthFailed("proof is not base64") from None
        auth_message = f"{self.bare},{self.server_first},{head}".encode()
        signature = hmac.new(self.stored_key, auth_message, self.h).digest()
        if len(proof) != len(signature):
            raise AuthFailed("proof of the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(self.h(client_key).digest(), self.stored_key):
            raise AuthFailed(f"wrong password for user {self.user!r}")
        self.done = True
        server_signature = hmac.new(self.server_key, auth_message, self.h).digest()
        return b"v=" + base64.b64encode(server_signature)


# ---- Kafka wire format ---------------------------------------------------------------------


def uvarint(buf, pos):
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def enc_uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def skip_tags(buf, pos):
    count, pos = uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = uvarint(buf, pos)
        size, pos = uvarint(buf, pos)
        pos += size
    return pos


def enc_string(s):
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def enc_compact_string(s):
    if s is None:
        return b"\x00"
    b = s.encode()
    return enc_uvarint(len(b) + 1) + b


def parse_header(frame):
    """api_key, api_version, correlation_id and where the rest starts (request header v1)."""
    api_key, api_version, corr, client_id_len = struct.unpack_from(">hhih", frame, 0)
    return api_key, api_version, corr, 10 + max(client_id_len, 0)


async def read_frame(reader, limit=None):
    head = await reader.readexactly(4)
    (size,) = struct.unpack(">i", head)
    if size < 0 or (limit is not None and size > limit):
        raise ValueError(f"frame of {size} bytes before the login (not Kafka? TLS?)")
    return head, await reader.readexactly(size)


def handshake_response(corr, error):
    body = struct.pack(">ihi", corr, error, len(MECHANISMS))
    return body + b"".join(enc_string(m) for m in MECHANISMS)


def authenticate_response(corr, version, error, message, auth_bytes):
    if version >= 2:  # flexible: response header v1, compact fields, tagged fields
        body = struct.pack(">i", corr) + b"\x00" + struct.pack(">h", error)
        body += enc_compact_string(message) + enc_uvarint(len(auth_bytes) + 1) + auth_bytes
        return body + struct.pack(">q", 0) + b"\x00"
    body = struct.pack(">ih", corr, error) + enc_string(message)
    body += struct.pack(">i", len(auth_bytes)) + auth_bytes
    if version >= 1:
        body += struct.pack(">q", 0)  # session_lifetime_ms 0: no re-authentication
    return body


def authenticate_bytes(frame, version, pos):
    if version >= 2:
        pos = skip_tags(frame, pos)  # request header v2 ends with tagged fields
        n, pos = uvarint(frame, pos)
        return bytes(frame[pos : pos + n - 1])
    (n,) = struct.unpack_from(">i", frame, pos)
    return bytes(frame[pos + 4 : pos + 4 + n])


def send(writer, body):
    writer.write(struct.pack(">i", len(body)) + body)
    return writer.drain()


class Front:
    def __init__(self, broker_port, creds):
        self.broker_port, self.creds = broker_port, creds

    async def handle(self, creader, cwriter):
        peer = cwriter.get_extra_info("peername")
        bwriter = None
        try:
            breader, bwriter = await asyncio.open_connection("127.0.0.1", self.broker_port)
            user = await self.login(creader, cwriter, breader, bwriter, peer)
            if user is not None:
                await asyncio.gather(pipe(creader, bwriter), pipe(breader, cwriter))
        except (asyncio.IncompleteReadError, OSError):
            pass
        except Exception as exc:  # one bad connection never stops the server
            log(f"{peer}: {exc!r}: closed")
        finally:
            for writer in (cwriter, bwriter):
                if writer is not None:
                    writer.close()

    async def login(self, creader, cwriter, breader, bwriter, peer):
        scram = None
        while True:
            head, frame = await read_frame(creader, MAX_FRAME)
            api_key, version, corr, pos = parse_header(frame)
            if api_key == API_VERSIONS and scram is None:
                bwriter.write(head + frame)
                await bwriter.drain()
                rhead, rframe = await read_frame(breader)
                cwriter.write(rhead + rframe)
                await cwriter.drain()
            elif api_key == SASL_HANDSHAKE and scram is None:
                (n,) = struct.unpack_from(">h", frame, pos)
                mechanism = bytes(frame[pos + 2 : pos + 2 + n]).decode(errors="replace")
                if mechanism not in MECHANISMS:
                    await send(cwriter, handshake_response(corr, UNSUPPORTED_SASL_MECHANISM))
                    log(f"{peer}: unsupported SASL mechanism {mechanism!r}: closed")
                    return None
                await send(cwriter, handshake_response(corr, 0))
                scram = Scram(mechanism, self.creds)
            elif api_key == SASL_AUTHENTICATE and scram is not None:
                try:
                    reply = scram.step(authenticate_bytes(frame, version, pos))
                except AuthFailed as exc:
                    log(f"{peer}: {scram.mech} login failed: {exc}: closed")
                    message = (
                        "Authentication failed during authentication due to invalid credentials"
                        f" with SASL mechanism {scram.mech}"
                    )
                    error = SASL_AUTHENTICATION_FAILED
                    await send(cwriter, authenticate_response(corr, version, error, message, b""))
                    return None
                await send(cwriter, authenticate_response(corr, version, 0, None, reply))
                if scram.done:
                    log(f"{peer}: logged in as {scram.user!r} with {scram.mech}")
                    return scram.user
            else:  # Kafka: "Unexpected Kafka request ... during SASL handshake", and it closes
                log(f"{peer}: request with api_key {api_key} before the login: closed")
                return None


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--user", required=True)
    parser.add_argument("--password-file", required=True)
    parser.add_argument("--route", action="append", required=True, help="LISTEN_PORT:BROKER_PORT")
    args = parser.parse_args()
    with open(args.password_file) as f:
        creds = make_credentials(args.user, f.read().strip())
    servers = []
    for route in args.route:
        listen, broker = (int(p) for p in route.split(":"))
        servers.append(await asyncio.start_server(Front(broker, creds).handle, "127.0.0.1", listen))
        log(f"listening on 127.0.0.1:{listen}, broker 127.0.0.1:{broker}")
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except OSError as exc:  # a busy port: services.sh retries on other ports
        sys.exit(f"kafka-scram-front: {exc}")
