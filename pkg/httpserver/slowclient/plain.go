package slowclient

import (
	"net"
	"time"
)

// DialPlain opens a plain TCP connection to addr, for a server without TLS (the health
// probe server), or returns nil when it cannot connect.
func DialPlain(addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil
	}
	return c
}

// TricklePlain is Trickle over plain TCP: it sends prefix at once, then slow a byte a
// second, reconnecting when the server closes the connection, until stop is closed or a
// connection fails.
func TricklePlain(addr, prefix, slow string, stop <-chan struct{}) {
	for {
		c := DialPlain(addr)
		if c == nil {
			return
		}
		_, err := c.Write([]byte(prefix))
		for i := 0; err == nil; i = (i + 1) % len(slow) {
			select {
			case <-stop:
				_ = c.Close()
				return
			case <-time.After(time.Second):
			}
			_, err = c.Write([]byte{slow[i]})
		}
		_ = c.Close()
	}
}
