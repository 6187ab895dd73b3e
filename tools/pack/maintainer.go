package main

import (
	"fmt"
	"net/mail"
	"os/exec"
	"strings"
)

// unofficialMaintainer names a build nobody signed for: where the builder has no git identity
// the packages say so, rather than claim a maintainer who never saw them.
const unofficialMaintainer = "Unofficial build <unofficial-build@agentd.invalid>"

// maintainer is the packages' Maintainer (deb) and Packager (rpm): the -maintainer flag when
// given, else whoever builds, from the repository's git config user.name and user.email. It is
// checked to be `Name <address>`, the form both formats want.
func maintainer(flagValue, repo string) (string, error) {
	m := strings.TrimSpace(flagValue)
	if m == "" {
		name, email := gitConfig(repo, "user.name"), gitConfig(repo, "user.email")
		if name == "" || email == "" {
			return unofficialMaintainer, nil
		}
		m = name + " <" + email + ">"
	}
	a, err := mail.ParseAddress(m)
	if err != nil || a.Name == "" {
		return "", fmt.Errorf("-maintainer %q: want `Name <address>` (%v)", m, err)
	}
	return m, nil
}

func gitConfig(repo, key string) string {
	out, err := exec.Command("git", "-C", repo, "config", key).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
