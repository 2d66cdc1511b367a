package slowclient

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"time"
)

// DialPlain opens a plain TCP connection to addr, for a server without TLS (the health
// probe server), or returns nil when it cannot connect.
func DialPlain(addr string) net.Conn { return DialPlainFrom("", addr) }

// DialPlainFrom is DialPlain from the local IP source ("": any), e.g. 127.0.0.2 to
// stand for another pod than the test's other clients on loopback.
func DialPlainFrom(source, addr string) net.Conn {
	var d net.Dialer
	if source != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(source)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil
	}
	return c
}

// TricklePlain is Trickle over plain TCP: it sends prefix at once, then slow a byte a
// second, reconnecting when the server closes the connection, until stop is closed or a
// connection fails.
func TricklePlain(addr, prefix, slow string, stop <-chan struct{}) {
	TricklePlainFrom("", addr, prefix, slow, stop)
}

// TricklePlainFrom is TricklePlain from the local IP source (DialPlainFrom), and
// returns how many of its connections the server closed (cut).
func TricklePlainFrom(source, addr, prefix, slow string, stop <-chan struct{}) (cut int) {
	return trickle(func() net.Conn { return DialPlainFrom(source, addr) }, prefix, slow, stop)
}

// HeaderFlood sends, as fast as the server answers, requests for path whose header is
// headerBytes long, each on a connection of its own from the local IP source
// (DialPlainFrom), until stop is closed or a connection fails. It returns how many
// were answered 431 Request Header Fields Too Large.
func HeaderFlood(source, addr, path string, headerBytes int, stop <-chan struct{}) (refused int) {
	request := []byte("GET " + path + " HTTP/1.1\r\nHost: flood\r\nX-Flood: " + strings.Repeat("a", headerBytes) + "\r\n\r\n")
	for {
		select {
		case <-stop:
			return refused
		default:
		}
		c := DialPlainFrom(source, addr)
		if c == nil {
			return refused
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write(request) // the server may answer and close before it has read it all
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			if resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge {
				refused++
			}
			_ = resp.Body.Close()
		}
		_ = c.Close()
	}
}
