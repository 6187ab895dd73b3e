package forensics

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
)

var bandColor = map[string]string{
	"NONE": "#e0e0e0", "PULLED": "#c6dbef", "CREATED": "#9ecae1", "RUNNING": "#41ab5d",
	"STOPPED": "#fd8d3c", "STOPPED_ACKED": "#fdd0a2", "CLEANING": "#bcbddc", "CLEANED": "#756bb1",
}

type band struct {
	from, to time.Time
	status   string
}

// WriteSVG draws the timeline: a band of statuses for the task and one for each container,
// and markers for failed reports (red), settlements (green), the stopped-acked event (the
// guard opening) and cleanup. Plain SVG 1.1, readable in any browser.
func (tl *Timeline) WriteSVG(out io.Writer) error {
	if len(tl.Steps) == 0 {
		return fmt.Errorf("task %s: nothing to draw", tl.Task)
	}
	w := bufio.NewWriter(out) // an element is a write: not a system call each
	start, end := tl.Steps[0].Time, tl.Steps[len(tl.Steps)-1].Time
	for _, s := range tl.Steps {
		if s.Until.After(end) {
			end = s.Until
		}
	}
	if !end.After(start) {
		end = start.Add(time.Second)
	}
	end = end.Add(end.Sub(start) / 20) // room to see the final state
	const left, width, rowH, top = 140.0, 820.0, 28.0, 60.0
	x := func(t time.Time) float64 { return left + width*float64(t.Sub(start))/float64(end.Sub(start)) }
	rows, label := tl.svgRows()
	rowOf := make(map[string]int, len(rows))
	for i, r := range rows {
		rowOf[r] = i
	}
	bands := map[string][]band{}
	cur := map[string]string{}
	since := map[string]time.Time{}
	for _, r := range rows {
		cur[r], since[r] = "NONE", start
	}
	move := func(row, to string, at time.Time) {
		if _, ok := cur[row]; !ok {
			return
		}
		bands[row] = append(bands[row], band{since[row], at, cur[row]})
		cur[row], since[row] = to, at
	}
	for _, s := range tl.Steps {
		switch s.Kind {
		case "task":
			move(lane(s.Host, "task"), s.To, s.Time)
		case "container":
			move(lane(s.Host, s.Container), s.To, s.Time)
		case "rejected":
			move(lane(s.Host, "task"), "STOPPED", s.Time)
		case "stopped-acked":
			move(lane(s.Host, "task"), "STOPPED_ACKED", s.Time)
		case "cleanup":
			move(lane(s.Host, "task"), "CLEANING", s.Time)
		case "cleaned":
			move(lane(s.Host, "task"), "CLEANED", s.Time)
		}
	}
	for _, r := range rows {
		bands[r] = append(bands[r], band{since[r], end, cur[r]})
	}
	height := top + rowH*float64(len(rows)) + 90
	esc := func(s string) string { var b strings.Builder; _ = xml.EscapeText(&b, []byte(s)); return b.String() }
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">
<title>agentd timeline of %s</title>
<rect x="0" y="0" width="%.0f" height="%.0f" fill="white"/>
<text x="10" y="20" font-size="14" font-weight="bold">%s</text>
<text x="10" y="38" fill="#555">%s .. %s (%s)</text>
`, left+width+20, height, left+width+20, height, esc(tl.Task), left+width+20, height, esc(tl.Task),
		start.UTC().Format(time.RFC3339Nano), end.UTC().Format(time.RFC3339Nano), end.Sub(start).Round(time.Millisecond))
	// A time axis: five ticks, labelled by the time since the first record.
	axisY := top + rowH*float64(len(rows)) + 2
	for i := 0; i <= 4; i++ {
		at := start.Add(end.Sub(start) * time.Duration(i) / 4)
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`+"\n", x(at), top-2, x(at), axisY)
		anchor, dx := "start", 2.0
		if i == 4 {
			anchor, dx = "end", -2
		}
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" fill="#777" font-size="9" text-anchor="%s">+%s</text>`+"\n", x(at)+dx, top-4, anchor, at.Sub(start).Round(time.Millisecond))
	}
	for i, r := range rows {
		y := top + rowH*float64(i)
		fmt.Fprintf(w, `<text x="10" y="%.1f">%s</text>`+"\n", y+rowH/2+4, esc(label[r]))
		for _, b := range bands[r] {
			x0, x1 := x(b.from), x(b.to)
			fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="white"><title>%s %s .. %s</title></rect>`+"\n",
				x0, y+3, max(x1-x0, 0.5), rowH-6, bandColor[b.status], esc(b.status), b.from.UTC().Format("15:04:05.000"), b.to.UTC().Format("15:04:05.000"))
			if x1-x0 > float64(len(b.status))*6.5 {
				fmt.Fprintf(w, `<text x="%.1f" y="%.1f" fill="#222">%s</text>`+"\n", x0+3, y+rowH/2+4, esc(b.status))
			}
		}
	}
	// Health verdicts sit on the lane of whose they are: green passing, red failing.
	for _, s := range tl.Steps {
		if s.Kind != "health" {
			continue
		}
		name := s.Container
		if name == "" {
			name = "task"
		}
		i, ok := rowOf[lane(s.Host, name)]
		if !ok {
			continue
		}
		fill := "#2ca02c"
		if strings.Contains(s.Text, "UNHEALTHY") {
			fill = "#d62728"
		}
		fmt.Fprintf(w, `<circle class="health" cx="%.1f" cy="%.1f" r="4" fill="%s" stroke="white"><title>%s</title></circle>`+"\n",
			x(s.Time), top+rowH*float64(i)+rowH/2, fill, esc(hostPrefix(s.Host)+s.Text))
	}
	my := top + rowH*float64(len(rows)) + 12
	for _, s := range tl.Steps {
		label := esc(hostPrefix(s.Host) + s.Text)
		switch s.Kind {
		case "reports-failed":
			fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="8" fill="#d62728"><title>reports %s %d× until %s</title></rect>`+"\n",
				x(s.Time), my, max(x(s.Until)-x(s.Time), 2), label, s.Count, s.Until.UTC().Format("15:04:05.000"))
		case "settled":
			fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="4" fill="#2ca02c"><title>%s</title></circle>`+"\n", x(s.Time), my+4, label)
		case "stopped-acked":
			fmt.Fprintf(w, `<path d="M %.1f %.1f l 6 6 l -6 6 l -6 -6 z" fill="#1f77b4"><title>%s</title></path>`+"\n", x(s.Time), my+14, label)
		case "cleanup", "cleaned":
			fmt.Fprintf(w, `<path d="M %.1f %.1f l 5 10 l -10 0 z" fill="#756bb1"><title>%s</title></path>`+"\n", x(s.Time), my+14, label)
		case "agent-started":
			fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" stroke-dasharray="3,2"><title>%s</title></line>`+"\n",
				x(s.Time), top-4, x(s.Time), my+26, label)
		}
	}
	ly := height - 22
	fmt.Fprintf(w, `<text x="10" y="%.1f" fill="#555">red: reports throttled or failed; green: settled; blue diamond: stopped-acked (cleanup allowed); purple: cleanup; dashed: agent restart; dots on a lane: health verdicts</text>`+"\n", ly)
	fmt.Fprintln(w, "</svg>")
	return w.Flush()
}

// lane keys a row of the drawing: a host's task, or one of its containers.
func lane(host, name string) string { return host + "\x00" + name }

func hostPrefix(host string) string {
	if host == "" {
		return ""
	}
	return host + ": "
}

// svgRows lists the drawing's rows and their labels: the task and each container, and in a
// timeline over several hosts, those of each host in turn, each label naming its host.
func (tl *Timeline) svgRows() ([]string, map[string]string) {
	var rows []string
	label := map[string]string{}
	add := func(host, name string) {
		k := lane(host, name)
		if _, ok := label[k]; ok {
			return
		}
		rows = append(rows, k)
		label[k] = name
		if host != "" {
			label[k] = host + " · " + name
		}
	}
	if len(tl.Hosts) == 0 {
		add("", "task")
		for _, c := range tl.Containers {
			add("", c)
		}
		return rows, label
	}
	for _, h := range tl.Hosts {
		add(h, "task")
		for _, name := range tl.lanes[h] {
			add(h, name)
		}
	}
	return rows, label
}
