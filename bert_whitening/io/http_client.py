"""HTTP and HTTPS POSTs under one deadline for the whole exchange, with a bound on the reply's
size: the transport of the TF Serving REST client (`bert_whitening.serving.RestClient`).

The standard library's ``http.client``, not urllib3 or requests: their timeouts bound each
connect and each receive, not the exchange, so a server that answers a byte at a time holds the
caller as long as it likes. A deadline checked before every wait of the socket (`_DeadlineSocket`,
and `_DeadlineTLSSocket` under TLS) bounds the whole of it, and ``http.client`` lets the
connection choose its socket; it adds no dependency either.

`HttpClient` keeps one connection per (scheme, host, port) for the next POST to the same server.
A POST is not idempotent as HTTP sees it (a gateway in front of TF Serving may count or bill each
one), so a request is sent again only when it cannot have reached the server: when a kept
connection is found closed before anything is sent, or breaks while the request is being sent
(a server acts on a whole request, and it never had one). Once the request was sent whole, a
failure is raised, never retried.
"""

import collections.abc
import http.client
import math
import re
import selectors
import socket
import ssl
import time
import urllib.parse

from bert_whitening.arguments import is_finite_number, optional_path, positive_int, shown
from bert_whitening.errors import BertWhiteningError
from bert_whitening.io.bounded import CA_FILE_BYTES, read_limited

#: `HttpClient.post`'s defaults: the whole exchange, and the largest reply read (a reply of
#: 10,000 vectors of 768 floats as JSON text is about 100 MB).
TIMEOUT_SECONDS = 30.0
MAX_REPLY_BYTES = 256 << 20

DEFAULT_PORTS = {"http": 80, "https": 443}

#: Headers a caller may not set: the client writes them (the body's length, the host the URL
#: names, the reply's encoding, which must be plain JSON), or they change how the exchange is
#: framed or whether its connection is kept.
RESERVED_HEADERS = frozenset(
    {
        "accept-encoding",
        "connection",
        "content-length",
        "expect",
        "host",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
#: A header name (an RFC 9110 token), and what a header value may not hold: CR or LF would end
#: the header and start another, and other control characters are no field value's.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_NOT_IN_VALUE = re.compile(r"[^\t\x20-\x7e\x80-\xff]")


def request_headers(headers):
    """``headers`` (a mapping of str to str, or None) with ``Content-Type: application/json``
    unless it names another, checked once, when a client is made, in one line that names the
    header at fault and never prints its value (it may be a credential)."""
    if headers is None:
        headers = {}
    if not isinstance(headers, collections.abc.Mapping):
        raise BertWhiteningError("headers must be a mapping of names to values, got %s" % type(headers).__name__)
    checked, seen = {}, {}
    for name, value in headers.items():
        if not isinstance(name, str) or not _HEADER_NAME.match(name):
            raise BertWhiteningError("headers: %s is not a header name" % shown(name))
        lowered = name.lower()
        if lowered in RESERVED_HEADERS:
            raise BertWhiteningError(
                "headers: %s is the client's to write (the exchange's framing, host and connection)" % name
            )
        if lowered in seen:
            raise BertWhiteningError("headers: %s and %s are one header (names ignore case)" % (seen[lowered], name))
        if not isinstance(value, str):
            raise BertWhiteningError("headers[%r] must be a str, got %s" % (name, type(value).__name__))
        bad = _NOT_IN_VALUE.search(value)
        if bad:
            raise BertWhiteningError(
                "headers[%r]: its value holds U+%04X at character %d (a line break would end the header)"
                % (name, ord(bad.group()), bad.start())
            )
        seen[lowered] = name
        checked[name] = value
    if "content-type" not in seen:
        checked["Content-Type"] = "application/json"
    return checked


def tls_context(ca_file=None):
    """An ``ssl.SSLContext`` that checks the server's certificate chain and its host name: against
    the system's trust store, or, given ``ca_file`` (PEM or DER), against that file's certificates
    alone, read through the package's bounded reader."""
    if ca_file is None:
        context = ssl.create_default_context()
    else:
        ca_file = optional_path(ca_file, "ca_file")
        data = read_limited(ca_file, CA_FILE_BYTES, BertWhiteningError, "CA file")
        try:
            data = data.decode("ascii")  # PEM; bytes that are not ASCII can only be DER
        except UnicodeDecodeError:
            pass
        try:
            context = ssl.create_default_context(cadata=data)
        except (ssl.SSLError, ValueError) as error:
            reason = " ".join(str(error).split())
            raise BertWhiteningError(
                "%s: no CA certificate read from it (PEM or DER): %s" % (ca_file, reason)
            ) from None
    context.sslsocket_class = _DeadlineTLSSocket
    return context


class _Target:
    """What a URL addresses: the connection's key (scheme, host, port) and the request's path."""

    def __init__(self, url):
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port or DEFAULT_PORTS.get(parts.scheme)
        except (TypeError, ValueError, AttributeError):  # a port that is no number or out of range; no str
            parts = port = None
        if parts is None or parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise BertWhiteningError("%s: not an http:// or https:// URL of TF Serving's REST API" % shown(url))
        if parts.username is not None or parts.password is not None:
            raise BertWhiteningError(
                "%s://%s: a URL's user name and password are not sent; give an Authorization header (headers=)"
                % (parts.scheme, parts.hostname)
            )
        self.key = (parts.scheme, parts.hostname.lower(), port)
        self.path = (parts.path or "/") + ("?" + parts.query if parts.query else "")


def seconds(timeout):
    """``timeout`` when it is a positive, finite number of seconds (a bool is not one)."""
    if not is_finite_number(timeout) or not timeout > 0:
        raise BertWhiteningError("timeout must be a positive number of seconds, got %s" % shown(timeout))
    return float(timeout)


class HttpClient:
    """POSTs with the same ``headers`` to any number of servers, each over one kept connection.

    Not for several threads at once: give each thread its own client. Close it (or use it as a
    context manager) to close its connections."""

    def __init__(self, headers=None, ca_file=None):
        self._headers = request_headers(headers)
        self._tls = None if ca_file is None else tls_context(ca_file)  # the file is refused now, not at a request
        self._connections = {}

    def post(self, url, payload, timeout=TIMEOUT_SECONDS, max_bytes=MAX_REPLY_BYTES):
        """``(status, reply bytes)`` of POSTing ``payload`` (bytes) to ``url``, within ``timeout``
        seconds for the whole exchange (connecting, the TLS handshake, sending, the status line,
        the headers and the body: a server that answers a byte at a time is cut off anywhere) and
        ``max_bytes`` of reply. A timeout, a connection refused or reset, a certificate refused,
        and a reply that is not HTTP or is cut short are one `BertWhiteningError` line naming
        ``url``; the connection is then closed, and the next POST opens another."""
        deadline = time.monotonic() + seconds(timeout)
        max_bytes = positive_int(max_bytes, "max_bytes")
        target = _Target(url)
        if not isinstance(payload, bytes):
            raise BertWhiteningError("payload must be bytes, got %s" % type(payload).__name__)
        done = False
        try:
            reply = self._send(target, payload, deadline)
            status, data = reply.status, _reply_body(reply, url, max_bytes)
            done = True
        except TimeoutError:  # socket.timeout, and the deadline's own
            raise BertWhiteningError("%s: no whole reply within %g s" % (url, timeout)) from None
        except ssl.SSLCertVerificationError as error:
            raise BertWhiteningError(
                "%s: the server's certificate is refused: %s (a private CA: give its file, ca_file=)"
                % (url, error.verify_message)
            ) from None
        except (OSError, http.client.HTTPException, UnicodeError) as error:  # reset, refused, not HTTP
            reason = " ".join(str(error).split()) or "no reason given"
            raise BertWhiteningError("%s: the exchange failed: %s: %s" % (url, type(error).__name__, reason)) from None
        finally:
            if not done:
                self._drop(target.key)
        return status, data

    def _send(self, target, payload, deadline):
        """The reply of ``payload`` sent to ``target``, on its kept connection or a new one; sent
        again, once, on a new connection, only when the kept one turns out closed before the
        request was sent whole (see the module's docstring)."""
        connection = self._connections.get(target.key)
        if connection is None:
            scheme, host, port = target.key
            connection = _DeadlineConnection(host, port, self._context() if scheme == "https" else None)
            self._connections[target.key] = connection
        connection.deadline.at = deadline
        kept = connection.sock is not None
        if kept and _dropped(connection.sock):
            connection.close()
            kept = False
        try:
            connection.request("POST", target.path, body=payload, headers=self._headers)
        except OSError as error:
            if not kept or isinstance(error, TimeoutError):
                raise
            connection.close()
            connection.request("POST", target.path, body=payload, headers=self._headers)
        return connection.getresponse()

    def _context(self):
        if self._tls is None:
            self._tls = tls_context()
        return self._tls

    def _drop(self, key):
        connection = self._connections.pop(key, None)
        if connection is not None:
            connection.close()

    def close(self):
        """Close every kept connection; the client may still be used (it opens new ones)."""
        for key in list(self._connections):
            self._drop(key)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _reply_body(reply, url, max_bytes):
    """The whole body of ``reply``, refused past ``max_bytes`` or when the connection closes
    before the end its ``Content-Length`` gives."""
    chunks, size = [], 0
    while chunk := reply.read1(1 << 16):
        size += len(chunk)
        if size > max_bytes:
            raise BertWhiteningError("%s: the reply is larger than %d bytes" % (url, max_bytes))
        chunks.append(chunk)
    if reply.length:  # http.client's read1 returns what came when the connection closes early
        raise BertWhiteningError("%s: the connection closed %d bytes before the reply's end" % (url, reply.length))
    reply.close()  # read to its end, yet open to http.client until closed, which the next request needs
    return b"".join(chunks)


def _dropped(sock):
    """Whether a kept connection can no longer carry a request: an idle HTTP/1.1 connection has
    nothing to read, so anything readable (the server's close, a reset, a TLS alert, stray
    bytes) means it is done."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        return bool(selector.select(0))


class _Deadline:
    """When the current exchange must end (``time.monotonic``), shared by a connection and its
    socket, so that a kept connection's waits end by each exchange's own deadline."""

    def __init__(self):
        self.at = -math.inf

    def remaining(self):
        remaining = self.at - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("past the deadline")
        return remaining


class _BoundedWaits:
    """Each wait of the socket (connect, send, receive) ends by ``self.deadline``: http.client
    reads the status line and headers line by line, each line with as many receives as the server
    sends pieces, so a timeout per receive would let a server that trickles them hold the caller
    for as long as it likes."""

    deadline = None  # a _Deadline, set when the socket is made

    def _until_deadline(self):
        self.settimeout(self.deadline.remaining())

    def connect(self, address):
        self._until_deadline()
        return super().connect(address)

    def sendall(self, data, *flags):  # a timeout bounds a whole sendall (Python 3.5 on)
        self._until_deadline()
        return super().sendall(data, *flags)

    def send(self, data, *flags):
        self._until_deadline()
        return super().send(data, *flags)

    def recv_into(self, buffer, *args):  # what the reply's file object reads with
        self._until_deadline()
        return super().recv_into(buffer, *args)

    def recv(self, size, *flags):
        self._until_deadline()
        return super().recv(size, *flags)


class _DeadlineSocket(_BoundedWaits, socket.socket):
    """A TCP socket whose waits end by ``deadline``."""

    def __init__(self, family, kind, proto, deadline):
        super().__init__(family, kind, proto)
        self.deadline = deadline


class _DeadlineTLSSocket(_BoundedWaits, ssl.SSLSocket):
    """A TLS socket whose waits, the handshake's included, end by its ``deadline``: `tls_context`
    makes ``wrap_socket`` return one (``sslsocket_class``), whose own sends and receives each wait
    on the socket's timeout, which `_BoundedWaits` sets before each."""

    def do_handshake(self, *args):
        self._until_deadline()
        return super().do_handshake(*args)


class _DeadlineConnection(http.client.HTTPConnection):
    """http.client's connection on a `_DeadlineSocket`, wrapped in TLS when given a context (the
    host name checked against the certificate): each address the host name resolves to is tried
    until the deadline (the name lookup itself is the system resolver's)."""

    def __init__(self, host, port, tls=None):
        super().__init__(host, port)
        self.tls = tls
        self.deadline = _Deadline()

    def connect(self):
        sock = self._tcp()
        if self.tls is not None:
            try:
                sock = self.tls.wrap_socket(sock, server_hostname=self.host, do_handshake_on_connect=False)
                sock.deadline = self.deadline
                sock.do_handshake()
            except BaseException:
                sock.close()
                raise
        self.sock = sock

    def _tcp(self):
        failure = None
        for family, kind, proto, _, address in socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM):
            sock = _DeadlineSocket(family, kind, proto, self.deadline)
            try:
                sock.connect(address)
            except OSError as error:
                sock.close()
                failure = error
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as http.client sets it
            return sock
        raise failure or OSError("%s resolves to no address" % self.host)
