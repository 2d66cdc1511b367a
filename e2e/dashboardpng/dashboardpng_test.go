package dashboardpng

import (
	"context"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"gonum.org/v1/plot/vg"
)

// chartDashboard is the dashboard the chart ships: the picture reads its queries.
const chartDashboard = "../../charts/trainyard/dashboards/trainyard.json"

// fakePrometheus serves the Prometheus HTTP API's query_range with one answer in
// the API's format (testdata/query_range.json: two series over 30 steps, one with a
// NaN gap, as a quantile without observations has) for every query, but an empty matrix for the queries
// containing empty. It records the queries it was sent.
type fakePrometheus struct {
	*httptest.Server
	mu      sync.Mutex
	queries []string
}

func newFakePrometheus(t *testing.T, empty string) *fakePrometheus {
	t.Helper()
	recorded, err := os.ReadFile("testdata/query_range.json")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePrometheus{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query_range" {
			http.NotFound(w, r)
			return
		}
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		q := r.Form.Get("query")
		for _, p := range []string{"start", "end", "step"} {
			if r.Form.Get(p) == "" {
				http.Error(w, `{"status":"error","errorType":"bad_data","error":"no `+p+`"}`, http.StatusBadRequest)
				return
			}
		}
		f.mu.Lock()
		f.queries = append(f.queries, q)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if empty != "" && strings.Contains(q, empty) {
			_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[]}}`))
			return
		}
		_, _ = w.Write(recorded)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakePrometheus) api(t *testing.T) promv1.API {
	t.Helper()
	c, err := api.NewClient(api.Config{Address: f.URL})
	if err != nil {
		t.Fatal(err)
	}
	return promv1.NewAPI(c)
}

func readChartDashboard(t *testing.T) *Dashboard {
	t.Helper()
	data, err := os.ReadFile(chartDashboard)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ReadDashboard(data)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var scope = Scope{Range: 15 * time.Minute, RateInterval: time.Minute}

// TestPicture draws the main panels from the fake Prometheus and checks the PNG:
// its size is two panels a line, and every panel's tile has drawn lines in it.
func TestPicture(t *testing.T) {
	d := readChartDashboard(t)
	panels, err := d.Select(MainPanels)
	if err != nil {
		t.Fatal(err)
	}
	prom := newFakePrometheus(t, "")
	drawn, err := d.Fetch(context.Background(), prom.api(t), panels, scope, time.Unix(1764384450, 0), 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range prom.queries {
		if strings.Contains(q, "$") {
			t.Errorf("query sent with a Grafana variable left: %s", q)
		}
	}
	for _, pd := range drawn {
		if len(pd.Series) < len(pd.Queries) {
			t.Errorf("panel %q: %d series for %d queries", pd.Title, len(pd.Series), len(pd.Queries))
		}
	}

	out := filepath.Join(t.TempDir(), "sub", "dashboard.png")
	if err := Draw(drawn, out); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", out, err)
	}
	rows := (len(MainPanels) + columns - 1) / columns
	wantW, wantH := int((columns * panelWidth).Dots(dpi)), int((vg.Length(rows) * panelHeight).Dots(dpi))
	if b := img.Bounds(); b.Dx() != wantW || b.Dy() != wantH {
		t.Errorf("PNG is %dx%d, want %dx%d (%d panels, %d a line)", b.Dx(), b.Dy(), wantW, wantH, len(MainPanels), columns)
	}
	// Each panel's plot area (its tile's left part) has coloured, not grey, pixels:
	// its lines were drawn.
	tileW, tileH := img.Bounds().Dx()/columns, img.Bounds().Dy()/rows
	for i, title := range MainPanels {
		x0, y0 := (i%columns)*tileW, (i/columns)*tileH
		coloured := 0
		for y := y0; y < y0+tileH; y++ {
			for x := x0; x < x0+tileW*7/10; x++ {
				r, g, b, _ := img.At(x, y).RGBA()
				if max(r, g, b)-min(r, g, b) > 0x3000 {
					coloured++
				}
			}
		}
		if coloured < 200 {
			t.Errorf("panel %q: %d coloured pixels in its plot area, want lines", title, coloured)
		}
	}
}

// TestEmptyQueryFails checks that a query without data fails the picture, naming
// the panel, the query and its expression.
func TestEmptyQueryFails(t *testing.T) {
	d := readChartDashboard(t)
	panels, err := d.Select(MainPanels)
	if err != nil {
		t.Fatal(err)
	}
	prom := newFakePrometheus(t, "workqueue_depth")
	_, err = d.Fetch(context.Background(), prom.api(t), panels, scope, time.Unix(1764384450, 0), 15*time.Second)
	if err == nil {
		t.Fatal("Fetch succeeded with an empty query")
	}
	for _, want := range []string{`panel "Queue depth" query A returned no data`, "workqueue_depth{"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "Processing time") {
		t.Errorf("error names a panel that has data: %v", err)
	}
}

func TestSelectUnknownPanel(t *testing.T) {
	d := readChartDashboard(t)
	if _, err := d.Select([]string{"Queue depth", "Queue dept"}); err == nil || !strings.Contains(err.Error(), `"Queue dept"`) {
		t.Errorf("Select of a missing title: %v, want an error naming it", err)
	}
}

func TestExpand(t *testing.T) {
	d := &Dashboard{Vars: map[string]string{"slo_latency": "30"}}
	got, err := d.Expand(`sum(rate(x{namespace="$namespace", job="$job", stage=~"$stage", le=~"${slo_latency}"}[$__rate_interval])) / $__range`,
		Scope{Job: "trainyard", Range: 10 * time.Minute, RateInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	want := `sum(rate(x{namespace=~".*", job=~"trainyard", stage=~".*", le=~"30"}[1m])) / 10m`
	if got != want {
		t.Errorf("Expand:\n got %s\nwant %s", got, want)
	}
	if _, err := d.Expand(`x{a="$nope"}`, scope); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Expand of an undefined variable: %v, want an error naming it", err)
	}
}

func TestLegend(t *testing.T) {
	m := model.Metric{"stage": "status", "le": "1"}
	if got := Legend("p99 {{stage}}", m); got != "p99 status" {
		t.Errorf("Legend = %q", got)
	}
	if got := Legend("", m); got != `{le="1", stage="status"}` {
		t.Errorf("Legend of an empty template = %q", got)
	}
}

func TestTimeFormat(t *testing.T) {
	at := func(d time.Duration) []time.Time { return []time.Time{time.Unix(0, 0), time.Unix(0, 0).Add(d)} }
	if got := timeFormat(PanelData{Series: []Series{{Times: at(20 * time.Second)}}}); got != "15:04:05" {
		t.Errorf("a make dev run's 20 s: format %q, want seconds", got)
	}
	if got := timeFormat(PanelData{Series: []Series{{Times: at(time.Hour)}}}); got != "15:04" {
		t.Errorf("an hour: format %q, want minutes", got)
	}
}
