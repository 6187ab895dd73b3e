package docker

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/distribution/reference"
	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/registry"
	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/datadir"
)

// RegistryAuth is the registry credentials of a Docker config.json (--registry-auth-file, the
// docker/cli format), re-read when the file changes, so credentials can be rotated without a
// restart. A re-read that fails keeps the last good credentials (and says so once); a file
// that was never good is an error at start.
//
// Credentials only ever leave it encoded for the engine's X-Registry-Auth header: never in an
// error, a log line or a Note.
type RegistryAuth struct {
	path string
	log  zerolog.Logger

	mu     sync.Mutex
	stamp  fileStamp
	creds  map[string]registry.AuthConfig // by registry domain, lower case
	warned string                         // the bad version of the file already logged
}

// fileStamp tells versions of a file apart without reading it.
type fileStamp struct {
	mod   time.Time
	size  int64
	ino   uint64
	ctime syscall.Timespec // a chmod or chown changes it, and nothing else here
}

func stampOf(fi os.FileInfo) fileStamp {
	st := fileStamp{mod: fi.ModTime(), size: fi.Size()}
	if s, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino, st.ctime = s.Ino, s.Ctim
	}
	return st
}

// registryAuthLimit bounds the credentials file: a config.json of many registries is a few
// kilobytes; this leaves room for identity tokens.
const registryAuthLimit = 1 << 20

// LoadRegistryAuth reads the credentials file at path; any fault is an error naming it. The
// file gets the seal key's checks (datadir.ReadPrivate: the agent's own, 0600, no symlink, at
// most registryAuthLimit bytes), on this read and on every re-read.
func LoadRegistryAuth(path string, log zerolog.Logger) (*RegistryAuth, error) {
	a := &RegistryAuth{path: path, log: log}
	creds, fi, err := readDockerConfig(path)
	if err != nil {
		return nil, fmt.Errorf("--registry-auth-file %s: %w", path, err)
	}
	a.stamp, a.creds = stampOf(fi), creds
	return a, nil
}

// refresh re-reads the file when it changed since the last read. The stamp is the link's own
// (lstat), not its target's, and counts the inode change time: a file swapped for a link to
// the same file, or a chmod or chown, is a change, so the read's checks see it.
func (a *RegistryAuth) refresh() {
	fi, err := os.Lstat(a.path)
	var st fileStamp
	if err == nil {
		st = stampOf(fi)
		if st == a.stamp {
			return
		}
	}
	var creds map[string]registry.AuthConfig
	var read os.FileInfo
	if err == nil {
		creds, read, err = readDockerConfig(a.path)
	}
	if err != nil {
		// Once per bad version of the file (or per kind of fault), not once per pull.
		if w := fmt.Sprint(st, err); a.warned != w {
			a.warned = w
			a.log.Error().Str("registry_auth_file", a.path).Err(err).Msg("cannot re-read the registry credentials; pulls keep using the ones read before")
		}
		return
	}
	a.stamp, a.creds, a.warned = stampOf(read), creds, "" // the stamp of what was read
}

// Encoded is the X-Registry-Auth value for pulling image ("" when the file holds nothing for
// its registry), and the registry's name as the file keys it (for messages).
func (a *RegistryAuth) Encoded(image string) (auth, domain string, err error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", "", fmt.Errorf("%q is not an image reference: %w", image, err)
	}
	domain = strings.ToLower(reference.Domain(named))
	if a == nil {
		return "", domain, nil
	}
	a.mu.Lock()
	a.refresh()
	cfg, ok := a.creds[domain]
	a.mu.Unlock()
	if !ok {
		return "", domain, nil
	}
	// base64url JSON, as the engine reads it: the moby package encodes it, never a hand.
	enc, err := authconfig.Encode(cfg)
	if err != nil {
		return "", domain, fmt.Errorf("registry credentials for %s in %s cannot be encoded", domain, a.path)
	}
	return enc, domain, nil
}

// dockerConfig is the part of docker/cli's config.json that holds credentials.
type dockerConfig struct {
	Auths map[string]struct {
		Auth          string `json:"auth"`
		Username      string `json:"username"`
		Password      string `json:"password"`
		IdentityToken string `json:"identitytoken"`
		RegistryToken string `json:"registrytoken"`
	} `json:"auths"`
}

// readDockerConfig reads the file's auths by registry domain, and the stat of the file it
// read. Its errors name the entry at fault, never a value.
func readDockerConfig(path string) (map[string]registry.AuthConfig, os.FileInfo, error) {
	b, fi, err := datadir.ReadPrivate(path, registryAuthLimit)
	if err != nil {
		return nil, nil, err
	}
	creds, err := parseDockerConfig(b)
	return creds, fi, err
}

// parseDockerConfig reads a config.json's auths by registry domain.
func parseDockerConfig(b []byte) (map[string]registry.AuthConfig, error) {
	var cfg dockerConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("not a Docker config.json: invalid JSON at byte %d", se.Offset)
		}
		return nil, errors.New("not a Docker config.json: want {\"auths\": {REGISTRY: {\"auth\": …}}}")
	}
	if cfg.Auths == nil {
		return nil, errors.New("no \"auths\": want {\"auths\": {REGISTRY: {\"auth\": …}}}")
	}
	keys := make([]string, 0, len(cfg.Auths))
	for k := range cfg.Auths {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the same file always reads the same, whichever duplicate wins
	out := map[string]registry.AuthConfig{}
	for _, k := range keys {
		e := cfg.Auths[k]
		domain, err := registryDomain(k)
		if err != nil {
			return nil, fmt.Errorf("auths[%q]: %w", k, err)
		}
		ac := registry.AuthConfig{Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken,
			RegistryToken: e.RegistryToken, ServerAddress: domain}
		if e.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(e.Auth))
			if err != nil {
				return nil, fmt.Errorf("auths[%q].auth: not base64", k)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok || user == "" {
				return nil, fmt.Errorf("auths[%q].auth: not base64 of user:password", k)
			}
			ac.Username, ac.Password = user, pass
		}
		if ac.Username == "" && ac.IdentityToken == "" && ac.RegistryToken == "" {
			// What docker login writes when a credential store holds the secret: nothing
			// here to use.
			continue
		}
		out[domain] = ac
	}
	return out, nil
}

// registryDomain reads a key of auths as the domain references name: docker/cli writes
// "https://index.docker.io/v1/" for Docker Hub and host[:port] (sometimes with a scheme or
// a path) for others.
func registryDomain(key string) (string, error) {
	k := strings.TrimSpace(key)
	if i := strings.Index(k, "://"); i >= 0 {
		k = k[i+3:]
	}
	if i := strings.IndexByte(k, '/'); i >= 0 {
		k = k[:i]
	}
	k = strings.ToLower(k)
	if k == "" {
		return "", errors.New("no registry host")
	}
	switch k {
	case "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com":
		k = "docker.io"
	}
	// The host must be one a reference can name.
	if _, err := reference.ParseNormalizedNamed(k + "/x"); err != nil {
		return "", fmt.Errorf("not a registry host[:port]")
	}
	return k, nil
}

// decodeAuth reads an encoded X-Registry-Auth back (to know what to scrub).
func decodeAuth(encoded string) (*registry.AuthConfig, error) { return authconfig.Decode(encoded) }
