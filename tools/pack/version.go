package main

import (
	"fmt"
	"regexp"
	"strings"
)

// tagRE matches `git describe --tags --always` output (its -dirty cut off first): a tag
// vX.Y.Z[-pre], then optionally -N-gHASH (N commits after the tag); hashRE a bare hash.
var (
	tagRE  = regexp.MustCompile(`^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.]+?))?(?:-(\d+)-g([0-9a-f]+))?$`)
	hashRE = regexp.MustCompile(`^([0-9a-f]{4,40})$`)
)

// packageVersion maps a git describe to a version dpkg and rpm both accept and order as the
// history does. commits is the number of commits reachable from HEAD (git rev-list --count),
// which orders untagged builds, since a hash alone does not.
//
//	v1.2.3            → 1.2.3
//	v1.2.3-rc1        → 1.2.3~rc1            (before 1.2.3, for dpkg and rpm ≥ 4.10)
//	v1.2.3-4-gabc1234 → 1.2.3+git4.gabc1234  (after 1.2.3)
//	abc1234           → 0.0.0+git206.gabc1234 (an untagged history: commit 206)
//	… -dirty          → "dirty" appended as a last segment: the version says so
func packageVersion(describe string, commits int) (string, error) {
	clean, isDirty := strings.CutSuffix(describe, "-dirty")
	mark := ""
	if isDirty {
		mark = "-dirty"
	}
	if m := tagRE.FindStringSubmatch(clean); m != nil {
		v := m[1] + "." + m[2] + "." + m[3]
		if m[4] != "" {
			v += "~" + m[4]
		}
		if m[5] != "" {
			v += "+git" + m[5] + ".g" + m[6]
		}
		return v + dirty(mark, m[5] != ""), nil
	}
	if m := hashRE.FindStringSubmatch(clean); m != nil {
		if commits <= 0 {
			return "", fmt.Errorf("version %q: an untagged build needs the commit count (git rev-list --count HEAD)", describe)
		}
		return fmt.Sprintf("0.0.0+git%d.g%s", commits, m[1]) + dirty(mark, true), nil
	}
	return "", fmt.Errorf("version %q: not a git describe (vX.Y.Z[-pre][-N-gHASH][-dirty], or a commit hash)", describe)
}

func dirty(mark string, hasMeta bool) string {
	switch {
	case mark == "":
		return ""
	case hasMeta:
		return ".dirty"
	default:
		return "+dirty"
	}
}
