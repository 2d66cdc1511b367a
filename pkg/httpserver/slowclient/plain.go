package slowclient

import "net"

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
	trickle(func() net.Conn { return DialPlain(addr) }, prefix, slow, stop)
}
