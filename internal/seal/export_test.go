package seal

// Path is the key file (a test hook: errors name it, and the tests check they do).
func (k *Key) Path() string { return k.path }
