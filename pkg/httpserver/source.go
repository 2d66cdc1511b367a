package httpserver

import (
	"net"
	"sync"
	"sync/atomic"
)

// sourceListener closes, as soon as it is accepted, a connection whose source IP
// already holds max open connections, so that one client (a pod) cannot take every
// connection slot of a server and leave the others, Prometheus or the kubelet, waiting
// in the accept queue behind its own.
type sourceListener struct {
	net.Listener
	max     int
	refused *atomic.Int64

	mu   sync.Mutex
	open map[string]int
}

func (l *sourceListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := sourceIP(c.RemoteAddr())
		l.mu.Lock()
		full := l.open[ip] >= l.max
		if !full {
			l.open[ip]++
		}
		l.mu.Unlock()
		if !full {
			return &sourceConn{Conn: c, release: func() { l.release(ip) }}, nil
		}
		l.refused.Add(1)
		_ = c.Close()
	}
}

func (l *sourceListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[ip]--; l.open[ip] <= 0 {
		delete(l.open, ip)
	}
}

// sourceConn frees its source's count once, at its first Close.
type sourceConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *sourceConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// sourceIP is addr's IP, or its whole string when it has no port.
func sourceIP(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}
