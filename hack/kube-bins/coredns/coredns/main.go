// Command coredns is CoreDNS with only the plugins the local control plane's
// cluster DNS uses: its default build links every plugin (cloud DNS providers
// among them), which triples the cold build for nothing. Plugin order is
// CoreDNS's own (its plugin.cfg), restricted to these.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "template", "kubernetes"}
}

func main() { coremain.Run() }
