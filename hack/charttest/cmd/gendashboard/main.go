// Command gendashboard writes the Grafana dashboard the chart ships,
// charts/trainyard/dashboards/trainyard.json, from package dashboard.
//
// Usage, from hack/charttest: go run ./cmd/gendashboard [-out FILE]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/trainyard/trainyard/hack/charttest/dashboard"
)

func main() {
	out := flag.String("out", "../../charts/trainyard/dashboards/trainyard.json", "file to write")
	flag.Parse()
	data, err := dashboard.JSON()
	if err == nil {
		err = os.WriteFile(*out, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gendashboard:", err)
		os.Exit(1)
	}
}
