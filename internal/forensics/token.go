package forensics

import (
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Authorize adds the bearer token of TokenFile to a request to a live agent's API.
func (s Source) Authorize(req *http.Request) error {
	if s.TokenFile == "" {
		return nil
	}
	b, err := os.ReadFile(s.TokenFile)
	if err != nil {
		return fmt.Errorf("--api-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return fmt.Errorf("--api-token-file %s is empty", s.TokenFile)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	return nil
}
