package runtime

import (
	"sort"
	"strings"
)

// dockerHubHost is the canonical host of images named without a registry.
const dockerHubHost = "docker.io"

// RegistryAuthFor returns the credentials of registries that apply to image,
// or nil when none does.
//
// The image reference is parsed: its registry host is the first path segment
// when that segment contains a '.' or a ':' or is "localhost" (and is not the
// only segment), otherwise Docker Hub ("docker.io"). A registries key matches
// when its host equals the image's host exactly (case-insensitively) and its
// optional path ("ghcr.io/org") is a whole-segment prefix of the image's
// repository path. The longest matching path wins. A lookalike host such as
// "ghcr.io.evil.tld" or "ghcr.iox" therefore never receives the credentials
// of "ghcr.io". Local-only images ("~name") are never pulled and get nil.
func RegistryAuthFor(image string, registries map[string]RegistryAuth) *RegistryAuth {
	if image == "" || strings.HasPrefix(image, "~") || len(registries) == 0 {
		return nil
	}
	host, path := splitImage(image)
	if host == "" {
		return nil
	}

	// Visit keys in a fixed order so that equal-length ties (e.g. "ghcr.io"
	// and "GHCR.io/") resolve the same way every time.
	keys := make([]string, 0, len(registries))
	for k := range registries {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	bestLen := -1
	var best RegistryAuth
	for _, k := range keys {
		kHost, kPath, ok := splitKey(k)
		if !ok || kHost != host || !segmentPrefix(kPath, path) {
			continue
		}
		if n := segments(kPath); n > bestLen {
			bestLen = n
			best = registries[k]
		}
	}
	if bestLen < 0 {
		return nil
	}
	return &best
}

// splitImage returns the canonical registry host and the repository path of
// an image reference, without tag or digest.
func splitImage(image string) (host, path string) {
	ref := image
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i] // digest
	}
	// A tag can only be in the last segment (a ':' before a '/' is a port).
	last := strings.LastIndexByte(ref, '/')
	if i := strings.LastIndexByte(ref, ':'); i > last {
		ref = ref[:i]
	}
	first, rest, found := strings.Cut(ref, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		host, path = canonicalHost(first), rest
	} else {
		host, path = dockerHubHost, ref
		if !found {
			path = "library/" + ref
		}
	}
	if path == "" || strings.HasPrefix(path, "/") || strings.HasSuffix(path, "/") || strings.Contains(path, "//") {
		return "", ""
	}
	return host, path
}

// splitKey parses a registries key: "host" or "host/path", optionally with
// a scheme and trailing slashes. The first segment is always the host.
func splitKey(key string) (host, path string, ok bool) {
	k := strings.TrimSpace(key)
	k = strings.TrimPrefix(k, "https://")
	k = strings.TrimPrefix(k, "http://")
	k = strings.TrimRight(k, "/")
	host, path, _ = strings.Cut(k, "/")
	if host == "" || strings.Contains(path, "//") {
		return "", "", false
	}
	return canonicalHost(host), path, true
}

// canonicalHost lower-cases a registry host and folds Docker Hub's aliases.
func canonicalHost(h string) string {
	h = strings.ToLower(h)
	switch h {
	case "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com":
		return dockerHubHost
	}
	return h
}

// segmentPrefix reports whether prefix is empty or equal to path or a
// leading run of path's '/'-separated segments.
func segmentPrefix(prefix, path string) bool {
	if prefix == "" || prefix == path {
		return true
	}
	return strings.HasPrefix(path, prefix+"/")
}

func segments(p string) int {
	if p == "" {
		return 0
	}
	return strings.Count(p, "/") + 1
}
