package cluster

import (
	"os"
	"path/filepath"
	"testing"
)

func TestAuditLogReaderReadsCompleteLinesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	appendTo := func(s string) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	appendTo(`{"verb":"create","user":{"username":"a"},"objectRef":{"resource":"trainjobs","name":"x"},"responseStatus":{"code":201},"stageTimestamp":"2026-11-26T06:45:15.123456Z"}` + "\n" +
		`{"verb":"patch","user":{"username":"b"},"responseStatus":{"code":403}}` + "\n" + `{"verb":"upd`)
	r := NewAuditLogReader(path)
	events, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 {
		t.Fatalf("first Read: %d events, want the 2 complete lines", len(events))
	}
	if e := events[0]; e.Verb != "create" || e.User.Username != "a" || e.ObjectRef.Name != "x" || !e.Succeeded() || e.StageTimestamp.Nanosecond() != 123456000 {
		t.Errorf("first event parsed as %+v", e)
	}
	if e := events[1]; e.Succeeded() || e.Code() != 403 || e.ObjectRef != nil {
		t.Errorf("second event parsed as %+v", e)
	}
	appendTo(`ate","responseStatus":{"code":200}}` + "\n")
	events, err = r.Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Verb != "update" || !events[0].Succeeded() {
		t.Fatalf("second Read: %+v, want the completed update only", events)
	}
	if events, err := r.Read(); err != nil || len(events) != 0 {
		t.Fatalf("third Read: %+v, %v; want nothing new", events, err)
	}
	if all, err := ReadAuditLog(path); err != nil || len(all) != 3 {
		t.Fatalf("ReadAuditLog: %d events, %v; want 3", len(all), err)
	}
}
