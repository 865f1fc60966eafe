/*-------------------------------------------------------------------------
 *
 * relcache.c
 *	  The one relcache callback of the extension, and the list of the caches
 *	  it tells.  PostgreSQL offers a fixed number of relcache callback slots
 *	  per backend, shared by every library, so the extension takes one
 *	  (idem_relcache_init, from _PG_init) and passes each invalidation on to
 *	  the forget function of every cache that subscribed
 *	  (idem_relcache_subscribe, from the cache's own init function).
 *
 *	  Invariants: a forget function runs inside an invalidation, so it may
 *	  only mark or drop what it caches: it must not allocate, read a catalog
 *	  or raise an error.  It is called with the OID of the invalidated
 *	  relation, or InvalidOid for all of them, also before its cache was ever
 *	  filled.  The list is per backend and fixed after _PG_init; no lock, no
 *	  shared memory, no memory allocated.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/inval.h"

#include "idempotency.h"

/* The forget functions of the caches. */
#define IDEM_MAX_RELCACHE_SUBSCRIBERS 8
static IdemRelcacheForget relcache_subscribers[IDEM_MAX_RELCACHE_SUBSCRIBERS];
static int	n_relcache_subscribers = 0;

static void
relcache_dispatch(Datum arg, Oid relid)
{
	for (int i = 0; i < n_relcache_subscribers; i++)
		relcache_subscribers[i] (relid);
}

/* Take the extension's relcache callback slot (module.c's _PG_init). */
void
idem_relcache_init(void)
{
	CacheRegisterRelcacheCallback(relcache_dispatch, (Datum) 0);
}

/*
 * Have forget(relid) called at every relcache invalidation (relid
 * InvalidOid: all relations).  Idempotent; a cache calls it from its init
 * function, at load.
 */
void
idem_relcache_subscribe(IdemRelcacheForget forget)
{
	for (int i = 0; i < n_relcache_subscribers; i++)
		if (relcache_subscribers[i] == forget)
			return;
	if (n_relcache_subscribers == IDEM_MAX_RELCACHE_SUBSCRIBERS)
		elog(ERROR, "too many relcache subscribers");
	relcache_subscribers[n_relcache_subscribers++] = forget;
}
