package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/client"
	"github.com/rs/zerolog"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/runtime"
)

// PullConfig is how the Docker runtime pulls images. The zero value is the defaults: no
// credentials, if-not-present, one minute without progress, four tries.
type PullConfig struct {
	// Auth holds registry credentials (--registry-auth-file); nil: pull anonymously.
	Auth *RegistryAuth
	// DefaultPolicy applies to a container that names no pull_policy (--pull-policy).
	DefaultPolicy string
	// InactivityTimeout ends a pull whose progress stream has said nothing for this long
	// (--pull-inactivity-timeout): a transient failure. A pull that keeps making progress
	// has no deadline however long it takes.
	InactivityTimeout time.Duration
	// Tries bounds the attempts of a pull that fails transiently.
	Tries int
	// RetryInitial and RetryMax are the backoff between tries (tests make them short).
	RetryInitial, RetryMax time.Duration
	Log                    zerolog.Logger
}

// Defaults of PullConfig.
const (
	DefaultPullInactivity = time.Minute
	DefaultPullTries      = 4
)

func (c PullConfig) withDefaults() PullConfig {
	if c.DefaultPolicy == "" {
		c.DefaultPolicy = event.PullIfNotPresent
	}
	if c.InactivityTimeout <= 0 {
		c.InactivityTimeout = DefaultPullInactivity
	}
	if c.Tries <= 0 {
		c.Tries = DefaultPullTries
	}
	if c.RetryInitial <= 0 {
		c.RetryInitial = time.Second
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 15 * time.Second
	}
	return c
}

// errNoProgress is the cause of a pull cancelled for saying nothing too long.
var errNoProgress = errors.New("no progress")

// pullError is a failed attempt, sorted.
type pullError struct {
	kind      string // what went wrong, in a word or two ("unauthorized", "manifest unknown", …); empty: transient
	permanent bool
	msg       string // the engine's words, credentials scrubbed
}

func (p *pullError) Error() string {
	if p.kind == "" || strings.HasPrefix(strings.ToLower(p.msg), p.kind) {
		return p.msg
	}
	return p.kind + ": " + p.msg
}

// classify sorts an engine's pull error: permanent ones end the pull at once, the others
// are worth another try.
func classify(err error) *pullError {
	msg := err.Error()
	low := strings.ToLower(msg)
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(low, w) {
				return true
			}
		}
		return false
	}
	switch {
	case cerrdefs.IsUnauthorized(err) || cerrdefs.IsPermissionDenied(err) ||
		has("unauthorized", "authentication required", "no basic auth credentials", "access denied", "denied:", "requested access to the resource is denied", "may require 'docker login'"):
		return &pullError{kind: "unauthorized", permanent: true, msg: msg}
	case has("manifest unknown", "name unknown", "blob unknown"):
		return &pullError{kind: "manifest unknown", permanent: true, msg: msg}
	case has("invalid reference", "repository name must", "invalid argument") || cerrdefs.IsInvalidArgument(err):
		return &pullError{kind: "bad reference", permanent: true, msg: msg}
	case cerrdefs.IsNotFound(err) || has("not found"):
		return &pullError{kind: "not found", permanent: true, msg: msg}
	case has("no matching manifest", "unsupported"):
		return &pullError{kind: "unsupported image", permanent: true, msg: msg}
	}
	return &pullError{msg: msg} // transient: no word for it, the engine's says it
}

// PullImage makes the image present as policy says (runtime.Runtime): if-not-present (or the
// default) pulls only an image the engine lacks, always pulls every time (the tag may have
// moved), never only looks. See PullOutcome for what it answers.
func (e *Engine) PullImage(ctx context.Context, image, policy string) (runtime.PullOutcome, error) {
	if err := runtime.CheckPullPolicy(policy); err != nil {
		return runtime.PullOutcome{}, fmt.Errorf("pull %s: %w", image, err)
	}
	if policy == "" {
		policy = e.pulls.DefaultPolicy
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return runtime.PullOutcome{}, fmt.Errorf("pull %s: bad reference: %v", image, err)
	}
	cached, err := e.imageOf(ctx, named, image)
	present := err == nil
	if err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return runtime.PullOutcome{}, err
	}
	switch {
	case policy == event.PullNever && !present:
		return runtime.PullOutcome{}, fmt.Errorf("pull %s: not present, and pull_policy is never", image)
	case policy == event.PullNever, policy == event.PullIfNotPresent && present:
		cached.RefExisted = true
		return cached, nil
	}
	held, err := e.imageIDs(ctx)
	if err != nil {
		return runtime.PullOutcome{}, fmt.Errorf("pull %s: %w", image, err)
	}
	pulled := e.claims.pull(image) // its pull events are the agent's, not another's claim
	digest, tries, err := e.pullRetrying(ctx, image)
	if err != nil {
		pulled("")
		var pe *pullError
		if policy == event.PullAlways && present && errors.As(err, &pe) && !pe.permanent && ctx.Err() == nil {
			// As ECS's prefer-cached: a registry that is away does not stop a task whose
			// image is here; the reason says which image it got.
			cached.Note = fmt.Sprintf("pull of %s failed transiently (%s, %d tries); using the cached image %s", image, pe.msg, tries, cached.ImageID)
			cached.RefExisted = true
			e.pulls.Log.Warn().Str("image", image).Str("image_id", cached.ImageID).Int("tries", tries).Str("cause", pe.msg).
				Msg("pull failed transiently; using the cached image")
			return cached, nil
		}
		return runtime.PullOutcome{}, err
	}
	out, err := e.imageOf(ctx, named, image)
	if err != nil {
		pulled("")
		return runtime.PullOutcome{}, fmt.Errorf("pull %s: pulled, but the engine does not show it: %w", image, err)
	}
	if digest != "" {
		out.Digest = digest
	}
	// The agent's only when the engine held no image of this id before: an image the host had
	// under another name (an operator's REG/app@sha256:…, now also named REG/app:task) stays
	// whoever's it was, and so does one already up to date.
	out.Pulled = !held[out.ImageID]
	if out.Pulled {
		pulled(out.ImageID)
	} else {
		pulled("")
	}
	out.RefExisted = present && cached.ImageID == out.ImageID
	return out, nil
}

// imageIDs is the set of image ids the engine holds, intermediate images included.
func (e *Engine) imageIDs(ctx context.Context) (map[string]bool, error) {
	res, err := e.cli.ImageList(ctx, client.ImageListOptions{All: true})
	if err != nil {
		return nil, e.wrap("list", "images", err)
	}
	ids := make(map[string]bool, len(res.Items))
	for _, img := range res.Items {
		ids[img.ID] = true
	}
	return ids, nil
}

// imageOf is the engine's image under a reference: its id and the digest it came by.
func (e *Engine) imageOf(ctx context.Context, named reference.Named, image string) (runtime.PullOutcome, error) {
	res, err := e.cli.ImageInspect(ctx, image)
	if err != nil {
		return runtime.PullOutcome{}, e.wrap("inspect image", image, err)
	}
	return runtime.PullOutcome{ImageID: res.ID, Digest: digestOf(named, res.RepoDigests, res.ID)}, nil
}

// digestOf is the repo digest of named's repository among an image's repo digests, the
// reference's own digest when it has one, else the image id.
func digestOf(named reference.Named, repoDigests []string, id string) string {
	if d, ok := named.(reference.Digested); ok {
		return d.Digest().String()
	}
	for _, rd := range repoDigests {
		r, err := reference.ParseNormalizedNamed(rd)
		if err != nil {
			continue
		}
		if d, ok := r.(reference.Digested); ok && r.Name() == named.Name() {
			return d.Digest().String()
		}
	}
	return id
}

// pullRetrying pulls, retrying transient failures with backoff; it says how many tries it
// took and the digest the engine reported.
func (e *Engine) pullRetrying(ctx context.Context, image string) (digest string, tries int, err error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = e.pulls.RetryInitial, e.pulls.RetryMax, 0 // bounded by tries
	b.Reset()
	var bo backoff.BackOff = backoff.WithContext(backoff.WithMaxRetries(b, uint64(e.pulls.Tries-1)), ctx)
	err = backoff.RetryNotify(func() error {
		tries++
		d, err := e.pullOnce(ctx, image)
		if err == nil {
			digest = d
			return nil
		}
		var pe *pullError
		if !errors.As(err, &pe) || pe.permanent {
			return backoff.Permanent(err) // the engine is away, or retrying cannot help
		}
		return err
	}, bo, func(err error, wait time.Duration) {
		e.pulls.Log.Warn().Str("image", image).Int("try", tries).Dur("retry_in", wait).Str("cause", err.Error()).Msg("pull failed transiently; trying again")
	})
	if err == nil {
		return digest, tries, nil
	}
	var pe *pullError
	switch {
	case !errors.As(err, &pe):
		return "", tries, fmt.Errorf("pull %s: %w", image, err)
	case pe.permanent:
		return "", tries, fmt.Errorf("pull %s: %w", image, err)
	case ctx.Err() != nil:
		return "", tries, fmt.Errorf("pull %s: %w (after %d tries, the last: %v)", image, ctx.Err(), tries, err)
	}
	return "", tries, fmt.Errorf("pull %s: failed transiently %d times, the last: %w", image, tries, err)
}

// pullOnce is one pull. Its progress stream is read as it comes, and every message pushes the
// inactivity deadline: a pull that stalls ends, one that is slow but steady does not.
func (e *Engine) pullOnce(ctx context.Context, image string) (digest string, err error) {
	auth, _, err := e.pulls.Auth.Encoded(image)
	if err != nil {
		return "", &pullError{kind: "bad reference", permanent: true, msg: err.Error()}
	}
	scrub := secretsOf(auth)
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := e.pulls.InactivityTimeout
	timer := time.AfterFunc(idle, func() { cancel(errNoProgress) })
	defer timer.Stop()
	fail := func(err error) (string, error) {
		if context.Cause(pctx) == errNoProgress {
			return "", &pullError{kind: "timed out", msg: fmt.Sprintf("no progress for %s", idle)}
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if client.IsErrConnectionFailed(err) {
			return "", fmt.Errorf("docker engine at %s: %w: %v", e.host, runtime.ErrUnavailable, err)
		}
		pe := classify(err)
		pe.msg = scrub(pe.msg)
		return "", pe
	}
	resp, err := e.cli.ImagePull(pctx, image, client.ImagePullOptions{RegistryAuth: auth})
	if err != nil {
		return fail(err)
	}
	defer resp.Close()
	for m, err := range resp.JSONMessages(pctx) {
		timer.Reset(idle)
		if err != nil {
			return fail(err)
		}
		if m.Error != nil {
			return fail(&streamError{m.Error.Code, m.Error.Message})
		}
		if d, ok := strings.CutPrefix(m.Status, "Digest: "); ok {
			digest = strings.TrimSpace(d)
		}
	}
	if context.Cause(pctx) == errNoProgress {
		return fail(errNoProgress)
	}
	return digest, nil
}

// streamError is an error the engine reported inside the progress stream.
type streamError struct {
	code int
	msg  string
}

func (s *streamError) Error() string { return s.msg }

// Is lets errdefs read the stream error's HTTP code as the engine's client would.
func (s *streamError) Is(target error) bool {
	switch s.code {
	case 401:
		return errors.Is(cerrdefs.ErrUnauthenticated, target)
	case 403:
		return errors.Is(cerrdefs.ErrPermissionDenied, target)
	case 404:
		return errors.Is(cerrdefs.ErrNotFound, target)
	}
	return false
}

// secretsOf returns a scrubber that removes the credentials inside an encoded
// X-Registry-Auth from a message: the engine should never echo them, and if it did, they
// must still not reach an error, a log line or a Note.
func secretsOf(encoded string) func(string) string {
	if encoded == "" {
		return func(s string) string { return s }
	}
	var secrets []string
	if ac, err := decodeAuth(encoded); err == nil {
		for _, s := range []string{ac.Password, ac.IdentityToken, ac.RegistryToken} {
			if len(s) >= 3 {
				secrets = append(secrets, s)
			}
		}
	}
	secrets = append(secrets, encoded)
	return func(s string) string {
		for _, x := range secrets {
			s = strings.ReplaceAll(s, x, "[redacted]")
		}
		return s
	}
}
