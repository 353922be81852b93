"""The REST exchange (`bert_whitening.io.http_client`, `bert_whitening.serving.predict` and
`RestClient`) against loopback servers, plain HTTP and HTTPS with a CA and certificates made here:
one deadline for the whole exchange, the reply's size bound, headers, certificates, kept
connections. numpy only, no TensorFlow; the certificates are made with ``cryptography``, which
apache-beam (the ``test`` extra) installs."""

import datetime
import http.server
import json
import re
import socket
import ssl
import struct
import threading
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from bert_whitening.errors import BertWhiteningError
from bert_whitening.io import http_client
from bert_whitening.io.http_client import HttpClient, request_headers, tls_context
from bert_whitening.serving import RestClient, parse_response, predict, rest_url, text_request

#: Seconds a 1 s deadline may take on a loaded machine: far below what the exchanges take without one.
UNBOUNDED = 15
REPLY = json.dumps({"predictions": [[0.6, 0.8]]}).encode()


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject, key, issuer, issuer_key, extensions):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(issuer_key, hashes.SHA256())


def _ca(common_name):
    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(True, False, False, False, False, True, True, False, False)  # signatures, certs, CRLs
    extensions = [(x509.BasicConstraints(ca=True, path_length=None), True), (usage, True)]
    return _certificate(_name(common_name), key, _name(common_name), key, extensions), key


class Pki:
    """A private CA, a certificate it signs for ``localhost`` alone, and another CA that signed
    nothing here, as PEM files under ``directory``."""

    def __init__(self, directory):
        ca, ca_key = _ca("bert-whitening test CA")
        other, _ = _ca("another CA")
        key = ec.generate_private_key(ec.SECP256R1())
        extensions = [
            (x509.SubjectAlternativeName([x509.DNSName("localhost")]), False),
            (x509.BasicConstraints(ca=False, path_length=None), True),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        ]
        server = _certificate(_name("localhost"), key, ca.subject, ca_key, extensions)
        self.ca, self.other_ca = str(directory / "ca.pem"), str(directory / "other-ca.pem")
        self.ca_der = str(directory / "ca.der")
        certificate, private = str(directory / "server.pem"), str(directory / "server.key")
        for path, data in [
            (self.ca, ca.public_bytes(serialization.Encoding.PEM)),
            (self.ca_der, ca.public_bytes(serialization.Encoding.DER)),
            (self.other_ca, other.public_bytes(serialization.Encoding.PEM)),
            (certificate, server.public_bytes(serialization.Encoding.PEM)),
            (
                private,
                key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                ),
            ),
        ]:
            with open(path, "wb") as stream:
                stream.write(data)
        self.server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.server_context.load_cert_chain(certificate, private)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


class Server:
    """A loopback HTTP/1.1 server (HTTPS given ``tls``, a server context, at ``localhost``, the
    name its certificate has) answering each POST with ``answer(handler)``; it records each
    request's client port and headers (`requests`) and counts the connections it accepted
    (`connections`) and closed (`closed`, released once each). Stops by itself."""

    def __init__(self, answer, tls=None):
        owner = self
        self.requests, self.connections, self.closed = [], 0, threading.Semaphore(0)

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # connections are kept unless the handler closes them

            def setup(self):
                if tls is not None:
                    self.request = tls.wrap_socket(self.request, server_side=True)
                owner.connections += 1
                super().setup()

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                owner.requests.append((self.client_address[1], dict(self.headers)))
                answer(self)

            def finish(self):
                try:
                    super().finish()
                finally:
                    self.connection.close()
                    owner.closed.release()

            def log_message(self, *args):
                pass

        class Quiet(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # a client that refused the certificate, or went away

        self.server = Quiet(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        host = "127.0.0.1" if tls is None else "localhost"
        scheme = "http" if tls is None else "https"
        self.url = "%s://%s:%d/v1/models/encoder:predict" % (scheme, host, self.server.server_address[1])

    def wait_closed(self):
        """Wait until the server closed a connection (the one a test had it close)."""
        assert self.closed.acquire(timeout=UNBOUNDED)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def reply(handler, status, body):
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def answer_ok(handler):
    reply(handler, 200, REPLY)


def test_predict_returns_the_reply_and_an_error_reply_raises_in_parse():
    with Server(answer_ok) as server:
        assert parse_response(predict(server.url, text_request(["a"])), rows=1, dim=2).shape == (1, 2)
    error = json.dumps({"error": "Op type not registered"}).encode()
    with Server(lambda handler: reply(handler, 400, error)) as server:
        with pytest.raises(RuntimeError, match="Op type not registered"):
            parse_response(predict(server.url, text_request(["a"])))


def trickle(data, pause):
    """An answer that writes ``data`` a byte at a time, ``pause`` seconds apart, raw (each
    piece is quick, the whole is not); it stops when the client has gone."""

    def answer(handler):
        try:
            for byte in data:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                time.sleep(pause)
        except OSError:
            pass
        handler.close_connection = True  # what follows the bytes is the server's close

    return answer


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize(
    "answer",
    [
        trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", pause=1.0),  # the status line
        trickle(b"HTTP/1.1 200 OK\r\n" + b"X" * 60, pause=0.5),  # a header that never ends
        trickle(b"HTTP/1.1 200 OK\r\n" + b"X-Header: x\r\n" * 60, pause=0.05),  # headers, each quick
        trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b" " * 1000, pause=0.04),  # the body
    ],
)
def test_predict_bounds_the_whole_exchange(answer, scheme, pki):
    """The deadline covers the status line and headers too: http.client reads them with one
    receive per piece the server sends, and a timeout per receive let a server that trickled
    its status line hold predict(timeout=2.0) until it had sent all of it; over TLS each byte
    is a record of its own, read by the TLS socket's receives. Each answer takes over 30 s to
    send in full, so `UNBOUNDED` tells a kept deadline from none on a loaded machine."""
    with Server(answer, pki.server_context if scheme == "https" else None) as server:
        start = time.monotonic()
        with pytest.raises(BertWhiteningError, match="^%s: no whole reply within 1 s$" % re.escape(server.url)):
            predict(server.url, text_request(["a"]), timeout=1.0, ca_file=pki.ca)
        assert time.monotonic() - start < UNBOUNDED


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_predict_bounds_sending_to_a_server_that_does_not_read(scheme, pki):
    """Over TLS the server's silence holds the handshake, which the deadline bounds as well."""
    listener = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel does), never reads
    with listener:
        url = rest_url("127.0.0.1", "encoder", port=listener.getsockname()[1], scheme=scheme)
        start = time.monotonic()
        with pytest.raises(BertWhiteningError, match="no whole reply within 1 s"):
            predict(url, text_request(["a" * 1000] * 50_000), timeout=1.0, ca_file=pki.ca)  # 50 MB: beyond buffers
        assert time.monotonic() - start < UNBOUNDED


def reset(handler):
    """Close the connection with a TCP reset (linger 0) instead of a reply."""
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.close_connection = True
    handler.connection.close()


def test_a_reset_a_refusal_or_a_reply_cut_short_is_one_line():
    with Server(reset) as server:
        with pytest.raises(BertWhiteningError, match=r"predict: the exchange failed: ConnectionResetError: .*reset"):
            predict(server.url, text_request(["a"]))
    with Server(trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n[0.5]", pause=0)) as server:
        with pytest.raises(
            BertWhiteningError, match=r"predict: the connection closed 95 bytes before the reply's end$"
        ):
            predict(server.url, text_request(["a"]))
    with Server(trickle(b"SSH-2.0-OpenSSH\r\n\r\n", pause=0)) as server:
        with pytest.raises(BertWhiteningError, match=r"predict: the exchange failed: BadStatusLine: SSH-2.0-OpenSSH"):
            predict(server.url, text_request(["a"]))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    with pytest.raises(BertWhiteningError, match=r"predict: the exchange failed: ConnectionRefusedError: .*refused"):
        predict(rest_url("127.0.0.1", "encoder", port=port), text_request(["a"]))
    for url, timeout in [
        ("ftp://h/v1/models/m:predict", 1),
        ("http://h:99999/x", 1),
        (None, 1),
        ("http://h/x", 0),
        ("http://h/x", "1"),
        ("http://h/x", float("inf")),
        ("http://h/x", float("nan")),
    ]:
        with pytest.raises(
            BertWhiteningError, match="not an http:// or https:// URL|timeout must be a positive number"
        ):
            predict(url, {}, timeout=timeout)


def test_predict_bounds_the_reply_size():
    huge = b"[" + b"0," * 600_000 + b"0]"
    with Server(lambda handler: reply(handler, 200, huge)) as server:
        with pytest.raises(ValueError, match="the reply is larger than 1000000 bytes"):
            predict(server.url, text_request(["a"]), max_bytes=1_000_000)


def test_headers_reach_the_server_over_https(pki):
    """A gateway's credential and any other header go with every request, over a connection
    whose certificate the given CA file vouches for (PEM or DER)."""
    headers = {"Authorization": "Bearer s3cret", "X-Tenant": "search"}
    for ca_file in (pki.ca, pki.ca_der):
        with Server(answer_ok, pki.server_context) as server:
            with RestClient(headers=headers, ca_file=ca_file) as client:
                assert client.predict(server.url, text_request(["a"])) == {"predictions": [[0.6, 0.8]]}
            ((_, seen),) = server.requests
            assert seen["Authorization"] == "Bearer s3cret" and seen["X-Tenant"] == "search"
            assert seen["Content-Type"] == "application/json"
    with Server(answer_ok, pki.server_context) as server:
        predict(
            server.url, text_request(["a"]), headers={"content-type": "application/json; charset=utf-8"}, ca_file=pki.ca
        )
        ((_, seen),) = server.requests
        assert [value for name, value in seen.items() if name.lower() == "content-type"] == [
            "application/json; charset=utf-8"
        ]


def test_a_certificate_the_client_does_not_trust_is_refused_in_one_line(pki):
    """The system's trust store (no ``ca_file``) knows nothing of the test CA, and another CA's
    file vouches for nothing the server has: both refuse before anything is sent."""
    with Server(answer_ok, pki.server_context) as server:
        for ca_file in (None, pki.other_ca):
            with pytest.raises(
                BertWhiteningError,
                match=r"^%s: the server's certificate is refused: unable to get local issuer certificate "
                r"\(a private CA: give its file, ca_file=\)$" % re.escape(server.url),
            ):
                predict(server.url, text_request(["a"]), ca_file=ca_file)
        assert server.requests == []


def test_a_certificate_for_another_host_name_is_refused(pki):
    """The certificate names ``localhost`` alone; the same server reached as 127.0.0.1 is refused."""
    with Server(answer_ok, pki.server_context) as server:
        url = server.url.replace("localhost", "127.0.0.1")
        with pytest.raises(
            BertWhiteningError,
            match=r"^%s: the server's certificate is refused: IP address mismatch, certificate is not valid for "
            r"'127.0.0.1'\." % re.escape(url),
        ):
            predict(url, text_request(["a"]), ca_file=pki.ca)
        assert server.requests == []


def test_a_client_keeps_one_connection_for_its_calls(pki):
    """Calls of one client share a connection, each under its own deadline (the first's is past
    when the next ones start); two `predict` calls, each with its own client, make two."""
    with Server(answer_ok, pki.server_context) as server:
        with RestClient(ca_file=pki.ca) as client:
            for timeout in (0.5, 30, 30):
                assert client.predict(server.url, text_request(["a"]), timeout)["predictions"] == [[0.6, 0.8]]
                time.sleep(0.6)
        assert server.connections == 1
        assert len({port for port, _ in server.requests}) == 1 and len(server.requests) == 3
    with Server(answer_ok, pki.server_context) as server:
        for _ in range(2):
            predict(server.url, text_request(["a"]), ca_file=pki.ca)
        assert server.connections == 2


def close_after(handler):
    """Reply, then close the connection, the reply saying nothing of it (no ``Connection: close``):
    as a server does whose idle connections time out."""
    answer_ok(handler)
    handler.close_connection = True


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_kept_connection_the_server_closed_is_reopened(scheme, pki, monkeypatch):
    """The close is seen before the request is sent: nothing is written to the closed connection
    (each request starts on no socket, a new one made for it)."""
    started_on = []
    request = http_client._DeadlineConnection.request

    def recorded(connection, *args, **kwargs):
        started_on.append(connection.sock)
        return request(connection, *args, **kwargs)

    monkeypatch.setattr(http_client._DeadlineConnection, "request", recorded)
    with Server(close_after, pki.server_context if scheme == "https" else None) as server:
        with RestClient(ca_file=pki.ca) as client:
            client.predict(server.url, text_request(["a"]))
            server.wait_closed()
            assert client.predict(server.url, text_request(["a"]))["predictions"] == [[0.6, 0.8]]
        assert server.connections == 2 and len(server.requests) == 2
    assert started_on == [None, None]


def test_a_kept_connection_that_breaks_while_sending_is_reopened(pki, monkeypatch):
    """The server resets the kept connection and the client does not see it before sending (as
    when the reset comes a moment after the check): the send fails, so the server cannot have
    the request, and it is sent on a new connection."""
    monkeypatch.setattr(http_client, "_dropped", lambda sock: False)
    replied, resets = threading.Event(), [reset]

    def answer_then_reset(handler):
        answer_ok(handler)
        if resets and replied.wait(UNBOUNDED):  # the reply was read: the reset cannot take it away
            resets.pop()(handler)

    with Server(answer_then_reset, pki.server_context) as server:
        with RestClient(ca_file=pki.ca) as client:
            client.predict(server.url, text_request(["a"]))
            replied.set()
            server.wait_closed()
            assert client.predict(server.url, text_request(["a"]))["predictions"] == [[0.6, 0.8]]
        assert server.connections == 2 and len(server.requests) == 2


def test_a_request_the_server_may_have_acted_on_is_not_sent_again(pki):
    """The server reads the second request whole, then closes without a reply: a POST may have
    been acted on (a gateway may count it), so the failure is raised and nothing is re-sent."""

    answered = []

    def first_only(handler):
        if not answered:
            answered.append(handler)
            answer_ok(handler)
        else:
            handler.close_connection = True

    with Server(first_only, pki.server_context) as server:
        with RestClient(ca_file=pki.ca) as client:
            client.predict(server.url, text_request(["a"]))
            with pytest.raises(
                BertWhiteningError, match=r"predict: the exchange failed: RemoteDisconnected: .*without response$"
            ):
                client.predict(server.url, text_request(["a"]))
            server.wait_closed()
        assert len(server.requests) == 2 and server.connections == 1


def test_headers_are_checked_once_in_one_line_that_never_shows_a_value():
    assert request_headers(None) == {"Content-Type": "application/json"}
    assert request_headers({"X-Api-Key": "k\tey"}) == {"X-Api-Key": "k\tey", "Content-Type": "application/json"}
    for headers, message in [
        (
            {"Authorization": "Bearer secret\r\nX-Evil: 1"},
            r"headers\['Authorization'\]: its value holds U\+000D at "
            r"character 13 \(a line break would end the header\)$",
        ),
        ({"Authorization": "secret\n"}, r"U\+000A at character 6"),
        ({"Authorization": "secret\x00"}, r"U\+0000 at character 6"),
        ({"Authorization": "秘密"}, r"U\+79D8 at character 0"),
        ({"Content-Length": "5"}, r"^headers: Content-Length is the client's to write"),
        ({"host": "elsewhere"}, r"^headers: host is the client's to write"),
        ({"Transfer-Encoding": "chunked"}, "Transfer-Encoding is the client's"),
        ({"Connection": "close"}, "Connection is the client's"),
        ({"Accept-Encoding": "gzip"}, "Accept-Encoding is the client's"),
        ({"X-A": "1", "x-a": "2"}, r"^headers: X-A and x-a are one header \(names ignore case\)$"),
        ({"X A": "1"}, r"^headers: 'X A' is not a header name$"),
        ({"X-A:": "1"}, r"^headers: 'X-A:' is not a header name$"),
        ({b"X-A": "1"}, r"^headers: b'X-A' is not a header name$"),
        ({"X-A": b"secret"}, r"^headers\['X-A'\] must be a str, got bytes$"),
        ({"X-A": 1}, r"^headers\['X-A'\] must be a str, got int$"),
        ([("X-A", "1")], r"^headers must be a mapping of names to values, got list$"),
    ]:
        with pytest.raises(BertWhiteningError, match=message) as refused:
            RestClient(headers=headers)
        assert "secret" not in str(refused.value) and "\n" not in str(refused.value)


def test_a_ca_file_is_read_and_checked_when_the_client_is_made(tmp_path, pki):
    not_pem = tmp_path / "not-a-certificate.pem"
    not_pem.write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
    for ca_file, message in [
        (str(tmp_path / "missing.pem"), r"missing.pem: no such CA file$"),
        (str(not_pem), r"not-a-certificate.pem: no CA certificate read from it \(PEM or DER\): "),
        (str(tmp_path), r": a directory, not a regular file: cannot be read as a CA file$"),
        (12, r"^ca_file must be a path"),
    ]:
        with pytest.raises(BertWhiteningError, match=message):
            RestClient(ca_file=ca_file)
    context = tls_context(pki.ca)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_credentials_in_a_url_are_refused_without_showing_them():
    for url in ("https://user:s3cret@serving.example/v1/models/m:predict", "http://token@serving.example/x"):
        with pytest.raises(
            BertWhiteningError, match=r"^https?://serving.example: a URL's user name and password are not sent"
        ) as refused:
            HttpClient().post(url, b"{}")
        assert "s3cret" not in str(refused.value) and "token" not in str(refused.value)


def test_a_payload_is_bytes():
    with pytest.raises(BertWhiteningError, match=r"^payload must be bytes, got str$"):
        HttpClient().post("http://127.0.0.1:9/x", "{}")


def test_rest_url_takes_https():
    assert rest_url("serving.example", "m", 1, port=443, scheme="https") == (
        "https://serving.example:443/v1/models/m/versions/1:predict"
    )
    with pytest.raises(BertWhiteningError, match="unknown scheme 'ftp'; choose one of: http, https"):
        rest_url("h", "m", scheme="ftp")
