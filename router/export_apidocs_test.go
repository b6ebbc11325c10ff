package router

// Routes returns the method and path of every route rt's echo router
// registered, in echo's own syntax (":name" parameters, "/*").
func Routes(rt *Router) [][2]string {
	var out [][2]string
	for _, r := range rt.echo.Routes() {
		out = append(out, [2]string{r.Method, r.Path})
	}
	return out
}
