package forensics_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
)

// The golden journals were left by real runs: `agentd dev --tasks 12` (dev.db) and an agent
// SIGKILLed twice under throttling, 5xx and re-sent payloads (crash.db), each exported with
// `agentd journal export`. Rewrite expectations with -rewrite.
func TestGolden(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var file string
			d.ScanArgs(t, "file", &file)
			j, closeJ, err := forensics.Open(context.Background(), forensics.Source{File: filepath.Join("..", "..", "testdata", "journals", file+".db")})
			if err != nil {
				t.Fatal(err)
			}
			defer closeJ()
			var b bytes.Buffer
			str := func(k string) string {
				var v string
				d.MaybeScanArgs(t, k, &v)
				return v
			}
			switch d.Cmd {
			case "dump":
				f := forensics.Filter{Task: str("task")}
				if f.Types, err = forensics.ParseTypes(str("type")); err != nil {
					return err.Error()
				}
				d.MaybeScanArgs(t, "from", &f.FromSeq)
				d.MaybeScanArgs(t, "to", &f.ToSeq)
				_, err = forensics.Dump(&b, j, f, d.HasArg("json"))
			case "replay":
				var seq uint64
				d.MaybeScanArgs(t, "to-seq", &seq)
				var rep forensics.Replayed
				if at := str("at"); at != "" {
					ts, perr := time.Parse(time.RFC3339Nano, at)
					if perr != nil {
						t.Fatal(perr)
					}
					rep, err = forensics.ReplayAt(j, ts)
				} else {
					rep, err = forensics.Replay(j, seq)
				}
				if err == nil {
					fmt.Fprintf(&b, "replayed to %d\n%s", rep.Seq, rep.State.Format(rep.At, fsm.Config{CleanupWait: time.Second}))
				}
			case "timeline":
				var tl *forensics.Timeline
				if tl, err = forensics.BuildTimeline(j, str("task")); err == nil {
					tl.WriteText(&b)
				}
			case "svg":
				var tl *forensics.Timeline
				if tl, err = forensics.BuildTimeline(j, str("task")); err == nil {
					var svg bytes.Buffer
					if err = tl.WriteSVG(&svg); err == nil {
						b.WriteString(svgSummary(t, svg.Bytes()))
					}
				}
			case "stats":
				var rep forensics.StatsReport
				if rep, err = forensics.Stats(j); err == nil {
					rep.Write(&b)
				}
			case "verify":
				var rep forensics.VerifyReport
				if rep, err = forensics.Verify(j); err == nil {
					fmt.Fprintf(&b, "%d findings, %d records, %d tombstones\n", len(rep.Findings), rep.Records, rep.Tombs)
				}
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return strings.ReplaceAll(b.String(), filepath.Join("..", "..", "testdata", "journals")+"/", "")
		})
	})
}

// svgSummary parses the SVG back as XML and counts what it draws.
func svgSummary(t *testing.T, b []byte) string {
	dec := xml.NewDecoder(bytes.NewReader(b))
	counts := map[string]int{}
	fills := map[string]int{}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
			for _, a := range se.Attr {
				if a.Name.Local == "fill" && se.Name.Local == "rect" {
					fills[a.Value]++
				}
			}
		}
	}
	return fmt.Sprintf("svg %d, rect %d, circle %d, path %d, text %d; state bands by colour %v\n", counts["svg"], counts["rect"], counts["circle"], counts["path"], counts["text"], fills)
}

var _ = journal.FileName
