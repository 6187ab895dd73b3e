// Command pack builds agentd's Debian and RPM packages from the static binaries `make dist`
// wrote, with nfpm (github.com/goreleaser/nfpm/v2): a library that writes both formats the
// way their own tools read them, rather than archives put together by hand here.
//
// It is a module of its own so that nfpm and its dependencies never enter the agent's
// binary or its go.mod.
//
// What it promises, checked by cmd/agentd's TestDist (make test-dist):
//   - /usr/bin/agentd (0755), the systemd unit pointing at it, /etc/agentd/agentd.json kept
//     across upgrades (a deb conffile, an rpm %config(noreplace)), /var/lib/agentd 0700, the
//     bind-roots drop-in as documentation only (never enabled by the package);
//   - maintainer scripts that reload systemd, start the agent on a fresh install only when it
//     is configured (`agentd run --print-config` accepts the settings: a backend is set), and
//     on an upgrade restart it only when it was running; on Debian through deb-systemd-helper
//     and deb-systemd-invoke, so a policy-rc.d that forbids starts (chroots, image builds) is
//     honoured; the rpm's touch systemd only when it runs;
//   - the Apache-2.0 license (LICENSE at the root) in the .deb's copyright file and the .rpm's
//     License tag, and a maintainer that is whoever builds (-maintainer, else git config), or
//     says the build is unofficial;
//   - a version taken from the tag (git describe), valid and ordered for dpkg and rpm, and a
//     changelog of the commits since the previous tag.
package main
