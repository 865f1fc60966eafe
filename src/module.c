/*-------------------------------------------------------------------------
 *
 * module.c
 *	  The library's entry: PG_MODULE_MAGIC, and _PG_init, which lets each
 *	  file that keeps state set itself up.  Nothing else lives here, and
 *	  no file of src/ calls into this one, so the calls between the files
 *	  form no circle (test/scripts/structure.sh checks that).
 *
 *	  Order, which a change must keep: first every idempotency.* setting,
 *	  each defined by the file that reads it (docs/reference.md lists
 *	  them; the preloaded ones also request shared memory or register the
 *	  purge launcher); then MarkGUCPrefixReserved("idempotency"), after
 *	  the last of them; then the invalidation callbacks: query.c's, the
 *	  one relcache callback (relcache.c), and each cache's subscription to
 *	  it.  A new setting is defined before the reservation, a new cache
 *	  subscribes after relcache.c.
 *
 *	  Invariants: every setting is defined at every load, preloaded or
 *	  not, so that a SET or ALTER SYSTEM of one is judged by its real rules
 *	  rather than refused as an unknown name under a reserved prefix
 *	  (stats.c and purge_worker.c define their PGC_POSTMASTER settings as
 *	  PGC_SIGHUP when the library is loaded after startup, which PostgreSQL
 *	  requires).  _PG_init may run in the postmaster (shared_preload_libraries):
 *	  nothing it calls allocates in CacheMemoryContext or reads a catalog.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/guc.h"

#include "idempotency.h"
#include "citus.h"
#include "claim.h"
#include "guard.h"
#include "machine.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	idem_args_init();
	idem_claim_init();
	idem_lease_init();
	idem_direct_init();
	idem_publish_init();
	idem_stats_init();
	idem_worker_init();
	idem_purge_round_init();

	MarkGUCPrefixReserved("idempotency");

	idem_query_init();
	idem_relcache_init();
	idem_shard_init();
	idem_citus_local_init();
	idem_machine_cache_init();
	idem_guard_cache_init();
}
