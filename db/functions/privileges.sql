-- Nobody but the schema's owner may call a function of batchq's until it is
-- granted: migrations/grants/grants.sql grants each role the calls it needs.
-- A function created anew gets EXECUTE for PUBLIC, so this runs after every
-- file.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA batchq FROM PUBLIC;
