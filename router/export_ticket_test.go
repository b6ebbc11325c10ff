package router

import "time"

// SetTicketClock makes now the clock of rt's ticket store; call it before
// the first ticket request.
func SetTicketClock(rt *Router, now func() time.Time) { rt.tickets.now = now }

// Tickets returns how many unused tickets rt holds.
func Tickets(rt *Router) int { return rt.tickets.count() }
