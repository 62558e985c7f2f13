package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/queue"
)

func tenantsCommand() *cli.Command {
	return &cli.Command{
		Name:  "tenants",
		Usage: "set and list tenants' weights and bounds (shared by all queues)",
		Subcommands: []*cli.Command{
			{
				Name:      "set",
				Usage:     "create or change a tenant's settings: give --weight, --max-queued or both; one not given stays as it is (for a new tenant, its default)",
				ArgsUsage: "NAME",
				Flags: []cli.Flag{
					&cli.Float64Flag{Name: "weight", Usage: "the tenant's share of each round relative to weight 1: 3 gets three times the tokens",
						DefaultText: "1 for a new tenant, else unchanged"},
					&cli.IntFlag{Name: "max-queued", Usage: "queued jobs the tenant may hold in each queue; 0 uses each queue's --max-per-tenant",
						DefaultText: "0 for a new tenant, else unchanged"},
					commandFormatFlag(),
				},
				Action: withQueueClient(tenantsSet),
			},
			{
				Name:   "list",
				Usage:  "list every tenant with settings (tenants never set weigh 1)",
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
		u.Weight = &w
	}
	if c.IsSet("max-queued") {
		n := c.Int("max-queued")
		u.MaxQueued = &n
	}
	t, err := client.UpdateTenant(c.Context, args[0], u)
	if err != nil {
		return settingUsage(err, "tenant name")
	}
	bound := "each queue's bound"
	if t.MaxQueued > 0 {
		bound = fmt.Sprintf("at most %d queued per queue", t.MaxQueued)
	}
	return writeResult(c, fmt.Sprintf("set tenant %s: weight %v, %s", t.Name, t.Weight, bound), tenantDataset(t))
}

func tenantsList(c *cli.Context, client *queue.Client) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	ts, err := client.Tenants(c.Context)
	if err != nil {
		return err
	}
	return writeList(c, tenantDataset(ts...))
}

// tenantDataset lists tenants; max_queued is empty where the queues' bound
// applies.
func tenantDataset(ts ...queue.Tenant) *dataset {
	d := newDataset("name", "weight", "max_queued")
	for _, t := range ts {
		var bound *int64
		if t.MaxQueued > 0 {
			b := int64(t.MaxQueued)
			bound = &b
		}
		d.add(t.Name, t.Weight, bound)
	}
	return d
}
