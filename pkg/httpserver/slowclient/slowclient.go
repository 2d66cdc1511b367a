// Package slowclient is a test kit of hostile HTTPS clients (HTTP/1.1 and HTTP/2), for the tests that hold a
// server (pkg/httpserver's bounds) against them: connections that send a request a byte
// a second, or send it whole and never read the answer.
package slowclient

import (
	"crypto/tls"
	"net"
	"time"
)

// Dial opens a TLS connection to addr over HTTP/1.1, trusting any certificate (an
// attacker's client), or returns nil when it cannot connect.
func Dial(addr string) *tls.Conn {
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}) //nolint:gosec // an attacker's client
	if err != nil {
		return nil
	}
	return c
}

// Trickle sends prefix at once, then slow a byte a second, reconnecting when the
// server closes the connection, until stop is closed or a connection fails. It returns
// how many of its connections the server closed (cut).
func Trickle(addr, prefix, slow string, stop <-chan struct{}) (cut int) {
	return trickle(func() net.Conn {
		if c := Dial(addr); c != nil {
			return c
		}
		return nil // not a nil *tls.Conn in a non-nil interface
	}, prefix, slow, stop)
}

// trickle is Trickle over the connections dial opens (nil: it cannot connect), and
// returns how many of them the server closed.
func trickle(dial func() net.Conn, prefix, slow string, stop <-chan struct{}) (cut int) {
	for {
		c := dial()
		if c == nil {
			return cut
		}
		_, err := c.Write([]byte(prefix))
		for i := 0; err == nil; i = (i + 1) % len(slow) {
			select {
			case <-stop:
				_ = c.Close()
				return cut
			case <-time.After(time.Second):
			}
			_, err = c.Write([]byte{slow[i]})
		}
		cut++
		_ = c.Close()
	}
}

// Hold sends head and body at once (giving up after writeTimeout) and holds the
// connection open, reading nothing, until stop is closed.
func Hold(addr string, head, body []byte, writeTimeout time.Duration, stop <-chan struct{}) {
	c := Dial(addr)
	if c == nil {
		return
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.Write(head); err == nil {
		_, _ = c.Write(body)
	}
	<-stop
}
