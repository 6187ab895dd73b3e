// Package docs holds agentd's documentation: the design and the wire contract (normative), the
// operator's guides, and these tests, which keep the pages true to the tree: every relative
// link resolves, no page cites a commit (history belongs in CHANGELOG.md), the README stays a
// manual of at most 400 lines, and its source map names every package.
package docs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pages are the documents the tests read, relative to the repository's root.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no pages in docs/: %v", err)
	}
	out := []string{"../README.md", "../CHANGELOG.md"}
	return append(out, docs...)
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// linkRE finds markdown links [text](target); images and reference links are not used here.
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// brokenLinks returns each relative link of the page at path whose file, or heading, is not there.
func brokenLinks(path, text string, readFile func(string) (string, error)) []string {
	var broken []string
	for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, anchor, _ := strings.Cut(target, "#")
		dest := path
		if file != "" {
			dest = filepath.Join(filepath.Dir(path), file)
		}
		content, err := readFile(dest)
		if err != nil {
			broken = append(broken, fmt.Sprintf("%s: %s: no such file", path, target))
			continue
		}
		if anchor != "" && !hasHeading(content, anchor) {
			broken = append(broken, fmt.Sprintf("%s: %s: no heading #%s in %s", path, target, anchor, dest))
		}
	}
	return broken
}

// hasHeading says whether a markdown heading of text has the anchor GitHub gives it.
func hasHeading(text, anchor string) bool {
	for _, line := range strings.Split(text, "\n") {
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") && slug(h) == anchor {
			return true
		}
	}
	return false
}

func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// hashRE is how a commit is cited: 7 to 40 hex digits with a letter and a digit among them.
var hashRE = regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)

func commitHashes(text string) []string {
	var out []string
	for _, w := range hashRE.FindAllString(text, -1) {
		if strings.ContainsAny(w, "abcdef") && strings.ContainsAny(w, "0123456789") {
			out = append(out, w)
		}
	}
	return out
}

// unmapped returns the packages the README's "Reading the source" does not name.
func unmapped(readme string, packages []string) []string {
	_, sourceMap, _ := strings.Cut(readme, "## Reading the source")
	var out []string
	for _, p := range packages {
		if !strings.Contains(sourceMap, "`"+p+"`") {
			out = append(out, p)
		}
	}
	return out
}

func modulePackages(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.Dir}}", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, filepath.ToSlash(rel))
	}
	return pkgs
}

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}

func TestEveryRelativeLinkResolves(t *testing.T) {
	for _, p := range pages(t) {
		for _, b := range brokenLinks(p, read(t, p), readFile) {
			t.Error(b)
		}
	}
}

func TestNoPageCitesACommit(t *testing.T) {
	for _, p := range append(pages(t)[:1], pages(t)[2:]...) { // README and docs/; CHANGELOG may name tags
		if h := commitHashes(read(t, p)); len(h) > 0 {
			t.Errorf("%s names commits %v: history belongs in CHANGELOG.md and closing notes", p, h)
		}
	}
}

func TestTheREADMEIsAManual(t *testing.T) {
	readme := read(t, "../README.md")
	if n := strings.Count(readme, "\n"); n > 400 {
		t.Errorf("README.md is %d lines; at most 400 (the details belong in docs/)", n)
	}
	for _, p := range unmapped(readme, modulePackages(t)) {
		t.Errorf("README.md's \"Reading the source\" does not name %s", p)
	}
}

// The checks themselves fail on what they are for: a broken link, a missing heading, a planted
// hash, a package left out of the map.
func TestTheChecksCatchWhatTheyAreFor(t *testing.T) {
	files := map[string]string{"docs/a.md": "# Sizing\n", "README.md": ""}
	fake := func(p string) (string, error) {
		if s, ok := files[filepath.ToSlash(p)]; ok {
			return s, nil
		}
		return "", os.ErrNotExist
	}
	if b := brokenLinks("README.md", "[x](docs/gone.md)", fake); len(b) != 1 {
		t.Errorf("a link to a missing file: %v", b)
	}
	if b := brokenLinks("README.md", "[x](docs/a.md#sizing) [y](https://example.org/x)", fake); len(b) != 0 {
		t.Errorf("good links reported: %v", b)
	}
	if b := brokenLinks("README.md", "[x](docs/a.md#gone)", fake); len(b) != 1 {
		t.Errorf("a link to a missing heading: %v", b)
	}
	if h := commitHashes("measured at 4944c07, sha256 digests aside; 1234567 and deadbeef are not commits"); len(h) != 1 || h[0] != "4944c07" {
		t.Errorf("commitHashes = %v, want [4944c07]", h)
	}
	if u := unmapped("## Reading the source\n| `internal/a` | |\n", []string{"internal/a", "internal/b"}); len(u) != 1 || u[0] != "internal/b" {
		t.Errorf("unmapped = %v, want [internal/b]", u)
	}
}
