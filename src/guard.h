/*-------------------------------------------------------------------------
 *
 * guard.h
 *	  Table guards: the installer (guard.c, guard_install.c), the per-backend
 *	  cache of guard triggers (guard_cache.c), what a real guard trigger is
 *	  (guard_shape.c), the trigger and the WHEN helper (guard_trigger.c) and
 *	  the trigger's errors (guard_error.c).  A GuardEntry is guard_cache.c's
 *	  entry for one trigger.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_GUARD_H
#define IDEM_GUARD_H

#include "idempotency.h"
#include "machine.h"

#include "commands/trigger.h"
#include "utils/rel.h"

/*
 * The arguments of a guard trigger: machine, status column, version column
 * or '', role; a log trigger on a Citus distributed table has a fifth, its
 * history table (schema-qualified, quoted as needed).
 */
#define IDEM_GUARD_NARGS	4
/* The fourth trigger argument. */
#define IDEM_GUARD_ROLE_CHECK	"check"
#define IDEM_GUARD_ROLE_VERSION	"version"
#define IDEM_GUARD_ROLE_LOG		"log"
#define IDEM_GUARD_ROLE_CHILDREN	"children"

typedef enum GuardRole
{
	GUARD_CHECK,
	GUARD_VERSION,
	GUARD_LOG,
	GUARD_CHILDREN
} GuardRole;

typedef struct GuardEntry
{
	Oid			tgoid;			/* hash key */
	bool		valid;			/* usable as is */
	bool		stale;			/* invalidated since the build started */
	int			busy;			/* calls of its trigger running (nested
								 * through user code: counted) */
	struct GuardEntry *orphan_next; /* stale and busy: the orphan list */
	Oid			relid;
	MemoryContext cxt;			/* the strings and arrays below */
	AttrNumber	status_att;
	AttrNumber	version_att;	/* 0: no version column */
	bool		version_int8;
	GuardRole	role;
	int			machine_len;
	char		machine[IDEM_MAX_MACHINE_BYTES + 1];
	IdemMachine *m;				/* valid while m_gen is current */
	uint64		m_gen;
	char	   *table_name;		/* schema-qualified, quoted as needed; on a
								 * Citus shard, the distributed table's */
	char	   *status_name;
	/* on a Citus shard: its shardminvalue (NULL otherwise, or a reference table) */
	bool		on_shard;
	char	   *shard_min;
	/* history (AFTER trigger only); history_table NULL: idem_transition_log */
	char	   *history_table;
	AttrNumber	dist_att;		/* with history_table: the distribution column */
	int			npk;
	AttrNumber *pk_atts;
	SPIPlanPtr	log_plan;
} GuardEntry;

/* guard_cache.c */
extern void idem_guard_cache_init(void);
extern GuardEntry *idem_guard_entry(FunctionCallInfo fcinfo, TriggerData *td);
extern IdemMachine *idem_guard_machine(GuardEntry *e, FunctionCallInfo fcinfo,
									  TriggerData *td);
/* guard_shape.c: the one definition of a guard trigger's shape */
extern bool idem_guard_trigger_is_real(Oid relid, int16 tgtype, int tgnattr,
									   const char *tgqual, int nargs, char **args,
									   Oid allows, GuardRole *role,
									   AttrNumber *status_att);
extern char *idem_guard_changed_sql(const char *qcol);
extern char *idem_guard_check_when(const char *qnsp, const char *machine,
								   const char *status_col, const char *version_col,
								   bool insert);
extern Oid	idem_guard_allows_oid(Oid nsp);
extern bool idem_rel_guarded(Relation rel, Oid trigfunc, Oid allows,
							 const char *machine, const char *column);

/* guard_error.c: the errors a guard trigger raises in the user's statement */
extern char *idem_guard_doing(TriggerData *td, const char *table);
IDEM_NORETURN extern void idem_not_a_guard(Trigger *tg);
extern void idem_guard_refuse(GuardEntry *e, IdemMachine *m, TriggerData *td,
							  text *from, text *to, IdemGuardVerdict v);

/* guard_install.c: the triggers of a guard (guard.c) */
/* A guard to create: the names create_guard_triggers puts into SQL. */
typedef struct GuardSpec
{
	char	   *table;			/* schema-qualified, quoted */
	char	   *status_col;
	char	   *version_col;	/* NULL: none */
	const char *qnsp;
	char	   *machine;
	char	   *qmachine;		/* a literal */
	char	   *history_table;	/* NULL: idem_transition_log; else quoted name */
} GuardSpec;

extern void idem_guard_create_triggers(const GuardSpec *g, bool history, bool children);
extern int	idem_guard_drop_triggers(Oid relid, Oid nsp, AttrNumber att,
									 const char *column, const char *table);
extern int	idem_guard_citus_begin(void);
extern void idem_guard_citus_end(int level);
extern char *idem_guard_history_table(Oid relid, const char *table,
									  AttrNumber distatt, int32 colocation,
									  const char *fname);
extern char *idem_guards_of_machine(Oid nsp, const char *machine);

#endif							/* IDEM_GUARD_H */
