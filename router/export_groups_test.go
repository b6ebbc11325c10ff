package router

import "time"

// ExpirePulls makes the pull members of rt idle at now leave their groups,
// as the background loop does.
func ExpirePulls(rt *Router, now time.Time) { rt.expirePulls(now, false) }
