package controller

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestEventNoteFitsTheAPI: an Event's note is cut to the API's 1,024 bytes at a
// character boundary (a trial's parameters can be long), and left alone below.
func TestEventNoteFitsTheAPI(t *testing.T) {
	if got := eventNote("short"); got != "short" {
		t.Errorf("eventNote(short) = %q", got)
	}
	long := strings.Repeat("é", 1000) // 2,000 bytes
	got := eventNote(long)
	if len(got) > maxNoteBytes || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Errorf("eventNote of 2,000 bytes: %d bytes, valid UTF-8 %t, ends %q; want at most %d, valid, ending in …",
			len(got), utf8.ValidString(got), got[len(got)-3:], maxNoteBytes)
	}
}
