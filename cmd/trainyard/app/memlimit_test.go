package app

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMemoryLimit(t *testing.T) {
	const gib = 1 << 30
	cases := map[string]struct {
		gomemlimit string
		v2, v1     string // file contents; "" means absent
		want       int64
		wantErr    bool
	}{
		"cgroup v2 limit":                {v2: "1073741824\n", want: gib * 9 / 10},
		"cgroup v2 unlimited":            {v2: "max\n", v1: "1073741824", want: 0},
		"cgroup v1 limit":                {v1: "268435456\n", want: 268435456 * 9 / 10},
		"cgroup v1 unlimited":            {v1: "9223372036854771712\n", want: 0},
		"no cgroup":                      {want: 0},
		"GOMEMLIMIT set by the operator": {gomemlimit: "200MiB", v2: "1073741824", want: 0},
		"garbage":                        {v2: "lots", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			files := []string{filepath.Join(dir, "memory.max"), filepath.Join(dir, "memory.limit_in_bytes")}
			for i, content := range []string{tc.v2, tc.v1} {
				if content != "" {
					if err := os.WriteFile(files[i], []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			var set int64
			got, err := memoryLimit(func(key string) string {
				if key == "GOMEMLIMIT" {
					return tc.gomemlimit
				}
				return ""
			}, files, func(limit int64) int64 { set = limit; return 0 })
			if (err != nil) != tc.wantErr {
				t.Fatalf("memoryLimit error = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want || set != tc.want {
				t.Errorf("memoryLimit = %d and set %d, want %d", got, set, tc.want)
			}
		})
	}
}
