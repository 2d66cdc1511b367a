package training

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	trainerclient "github.com/trainyard/trainyard/pkg/clientset/clientset/versioned"
)

// GetOptimizationJob returns what `kubectl get optimizationjob <name> -n <namespace>`
// prints — a header line and the object's line, columns aligned — from the table the
// API server renders with the CRD's printer columns (the same request kubectl makes:
// Accept a meta.k8s.io/v1 Table). Columns of priority above 0 (`-o wide`) are left
// out, and a date column is shown as an age, as kubectl does. now is the time ages are
// measured from. Errors: the request failed or its answer is not a Table.
func GetOptimizationJob(ctx context.Context, trainers trainerclient.Interface, namespace, name string, now time.Time) (string, error) {
	raw, err := trainers.TrainerV1alpha1().RESTClient().Get().Namespace(namespace).Resource("optimizationjobs").Name(name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx).Raw()
	if err != nil {
		return "", fmt.Errorf("getting OptimizationJob %s/%s as a table: %w", namespace, name, err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil || table.Kind != "Table" {
		return "", fmt.Errorf("OptimizationJob %s/%s: the answer is not a Table (%v): %.200s", namespace, name, err, raw)
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
	var header []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			header = append(header, strings.ToUpper(c.Name))
		}
	}
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, row := range table.Rows {
		var cells []string
		for i, c := range table.ColumnDefinitions {
			if c.Priority != 0 || i >= len(row.Cells) {
				continue
			}
			cells = append(cells, cell(row.Cells[i], c.Format, now))
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	if err := w.Flush(); err != nil {
		return "", err
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

// cell renders a table cell as kubectl does: "<none>" for null, an age for a date.
func cell(v any, format string, now time.Time) string {
	if v == nil {
		return "<none>"
	}
	s := fmt.Sprint(v)
	if format == "date" {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			return duration.HumanDuration(now.Sub(t))
		}
	}
	return s
}
