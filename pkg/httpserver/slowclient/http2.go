package slowclient

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"time"
)

// HTTP2Client returns a client that speaks HTTP/2 only, over TLS, trusting any
// certificate (an attacker's client), with at most maxConns connections (≤0: no
// bound). It carries up to the server's SETTINGS_MAX_CONCURRENT_STREAMS requests on a
// connection and opens another for more, so n requests in flight hold
// ⌈n / streams⌉ connections once they are open (requests started together, before the
// first connection is up, may each dial one: maxConns bounds them).
func HTTP2Client(maxConns int) *http.Client {
	t := &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // an attacker's client
		ForceAttemptHTTP2: true,
		MaxConnsPerHost:   maxConns,
	}
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP2(true)
	return &http.Client{Transport: t}
}

// TrickleHTTP2 POSTs to url over client (HTTP2Client) a request announcing length
// bytes of contentType and sending its body a byte a second, cycling through slow,
// until stop is closed or the server ends the stream. It returns the status the server
// answered (0: none, err says why), and cut: whether the server ended the stream before
// stop was closed.
func TrickleHTTP2(client *http.Client, url, contentType string, length int64, slow string, stop <-chan struct{}) (code int, cut bool, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, &trickleBody{slow: slow, stop: stop})
	if err != nil {
		return 0, false, err
	}
	req.ContentLength = length
	req.Header.Set("Content-Type", contentType)
	resp, err := client.Do(req)
	select {
	case <-stop:
		cut = false
	default:
		cut = true
	}
	if err != nil {
		return 0, cut, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, cut, nil
}

// trickleBody yields a byte of slow a second until stop is closed.
type trickleBody struct {
	slow string
	i    int
	stop <-chan struct{}
}

func (b *trickleBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	select {
	case <-b.stop:
		return 0, io.ErrUnexpectedEOF
	case <-time.After(time.Second):
	}
	p[0] = b.slow[b.i%len(b.slow)]
	b.i++
	return 1, nil
}
