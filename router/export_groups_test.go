package router

import "time"

// ExpirePulls makes the pull members of rt idle at now leave their groups,
// as the background loop does.
func ExpirePulls(rt *Router, now time.Time) { rt.expirePulls(now, false) }

// SweepGroups makes rt forget the groups it counts that the engine no
// longer knows, as the background loop does once a minute.
func SweepGroups(rt *Router) { rt.sweepGroups(time.Now(), true) }
