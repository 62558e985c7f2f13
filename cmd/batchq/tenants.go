package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/queue"
)

func tenantsCommand() *cli.Command {
	return &cli.Command{
		Name:  "tenants",
		Usage: "set and list tenants' weights and bounds, for every queue or for one",
		Subcommands: []*cli.Command{
			{
				Name:      "set",
				Usage:     "create or change a tenant's settings, for every queue or with --queue for one: give --weight, --max-queued or both; one not given stays as it is (for a new tenant, its default)",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.Float64Flag{Name: "weight", Usage: "the tenant's share of each round relative to weight 1: 3 gets three times the tokens (0.001..1000000)",
						DefaultText: "1 for a new tenant, else unchanged"},
					&cli.IntFlag{Name: "max-queued", Usage: "queued jobs the tenant may hold in each queue; 0 uses each queue's --max-per-tenant",
						DefaultText: "0 for a new tenant, else unchanged"},
					&cli.StringFlag{Name: "queue", Usage: "set the tenant's weight or bound for this queue only, over its settings for every queue; there, 0 means the setting for every queue",
						DefaultText: "every queue"},
					commandFormatFlag(),
				},
				Action: withQueueClient(tenantsSet),
			},
			{
				Name:      "unset",
				Usage:     "remove a tenant's settings for one queue: its settings for every queue apply there again",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "queue", Usage: "required: the queue"},
					commandFormatFlag(),
				},
				Action: withQueueClient(tenantsUnset),
			},
			{
				Name:   "list",
				Usage:  "list every tenant with settings, for every queue and for one (tenants never set weigh 1)",
				Flags:  []cli.Flag{commandFormatFlag()},
				Action: withQueueClient(tenantsList),
			},
		},
	}
}

func tenantsSet(c *cli.Context, client *queue.Client) error {
	args, err := commandArgs(c, "NAME")
	if err != nil {
		return err
	}
	if !c.IsSet("weight") && !c.IsSet("max-queued") {
		return usagef("batchq: tenants set: give --weight, --max-queued or both")
	}
	var u queue.TenantUpdate
	if c.IsSet("weight") {
		w := c.Float64("weight")
		if w == 0 && !c.IsSet("queue") {
			// 0 is documented for --queue; say so to whoever read it there.
			return usagef("batchq: --weight: must be in %s..%s (got 0); 0 goes with --queue only, where it means "+
				"the tenant's weight for every queue", weightCell(queue.MinWeight), weightCell(queue.MaxWeight))
		}
		u.Weight = &w
	}
	if c.IsSet("max-queued") {
		n := c.Int("max-queued")
		u.MaxQueued = &n
	}
	if c.IsSet("queue") {
		qt, err := client.UpdateQueueTenant(c.Context, c.String("queue"), args[0], u)
		if errors.Is(err, queue.ErrUnknownQueue) {
			return usageError{msg: err.Error()}
		}
		if err != nil {
			return settingUsage(err, "tenant name")
		}
		return writeResult(c, "set tenant "+qt.Tenant+" in queue "+qt.Queue+": "+describeQueueTenant(qt), queueTenantDataset(qt))
	}
	t, err := client.UpdateTenant(c.Context, args[0], u)
	if err != nil {
		return settingUsage(err, "tenant name")
	}
	bound := "each queue's bound"
	if t.MaxQueued > 0 {
		bound = fmt.Sprintf("at most %d queued per queue", t.MaxQueued)
	}
	return writeResult(c, fmt.Sprintf("set tenant %s: weight %s, %s", t.Name, weightCell(t.Weight), bound), tenantDataset(t))
}

func tenantsUnset(c *cli.Context, client *queue.Client) error {
	args, err := commandArgs(c, "NAME")
	if err != nil {
		return err
	}
	if err := requireFlags(c, "queue"); err != nil {
		return err
	}
	had, err := client.ClearQueueTenant(c.Context, c.String("queue"), args[0])
	if err != nil {
		return settingUsage(err, "tenant name")
	}
	sentence := fmt.Sprintf("tenant %s had no settings of its own in queue %s", args[0], c.String("queue"))
	if had {
		sentence = fmt.Sprintf("unset tenant %s in queue %s: its settings for every queue apply there", args[0], c.String("queue"))
	}
	d := newDataset("name", "queue", "removed")
	d.add(args[0], c.String("queue"), had)
	return writeResult(c, sentence, d)
}

func tenantsList(c *cli.Context, client *queue.Client) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	ts, err := client.Tenants(c.Context)
	if err != nil {
		return err
	}
	qts, err := client.QueueTenants(c.Context)
	if err != nil {
		return err
	}
	d := tenantDataset(ts...)
	for _, qt := range qts {
		addQueueTenant(d, qt)
	}
	return writeList(c, d)
}

func describeQueueTenant(qt queue.QueueTenant) string {
	if qt.Weight == 0 && qt.MaxQueued == 0 {
		return "its settings for every queue apply there; it has none of its own there"
	}
	weight, bound := "its weight for every queue", "its bound for every queue"
	if qt.Weight != 0 {
		weight = fmt.Sprintf("weight %s", weightCell(qt.Weight))
	}
	if qt.MaxQueued != 0 {
		bound = fmt.Sprintf("at most %d queued", qt.MaxQueued)
	}
	return weight + ", " + bound
}

func queueTenantDataset(qts ...queue.QueueTenant) *dataset {
	d := newDataset("name", "weight", "max_queued", "queue")
	for _, qt := range qts {
		addQueueTenant(d, qt)
	}
	return d
}

// addQueueTenant lists a tenant's settings for one queue; weight and
// max_queued are empty where its settings for every queue apply.
func addQueueTenant(d *dataset, qt queue.QueueTenant) {
	var weight any = (*float64)(nil)
	var bound *int64
	if qt.Weight != 0 {
		weight = weightCell(qt.Weight)
	}
	if qt.MaxQueued > 0 {
		b := int64(qt.MaxQueued)
		bound = &b
	}
	queue := qt.Queue
	d.add(qt.Tenant, weight, bound, &queue)
}

// tenantDataset lists tenants' settings for every queue (queue empty);
// max_queued is empty where the queues' bound applies.
func tenantDataset(ts ...queue.Tenant) *dataset {
	d := newDataset("name", "weight", "max_queued", "queue")
	for _, t := range ts {
		var bound *int64
		if t.MaxQueued > 0 {
			b := int64(t.MaxQueued)
			bound = &b
		}
		d.add(t.Name, weightCell(t.Weight), bound, (*string)(nil))
	}
	return d
}

// weightCell is a tenant's weight as a cell and in sentences: whole, in
// every format. A table rounds other numbers to three decimals, which would
// show a weight of 0.0015 as 0.002 (and JSON as 0.0015), and %v writes
// 1000000 as 1e+06.
type weightCell float64

func (w weightCell) String() string { return strconv.FormatFloat(float64(w), 'f', -1, 64) }
