package router

// TextJoined is closed when the router has loaded a tokenizer from an engine
// after start-up (one that joined late): tests wait on it instead of polling.
func TextJoined(g *Router) <-chan struct{} { return g.textJoined }
