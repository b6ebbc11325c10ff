package jsengine

// AppendMax is the engine's bound on one append (appendMax).
const AppendMax = appendMax
