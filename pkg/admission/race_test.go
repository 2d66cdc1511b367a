//go:build race

package admission

// raceDetector is whether the race detector is on: it slows TLS about tenfold, and the
// attackers of TestServerHoldsSlowClients share the server's process and cores.
const raceDetector = true
