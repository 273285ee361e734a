// Package v20170312 is a stand-in for the Tencent Cloud VPC SDK of the same
// path, which the Go module proxy does not serve. flanneld links every
// backend, tencent-vpc among them, so this package declares exactly the
// API that backend uses; every call fails, because a flanneld built here
// cannot reach Tencent Cloud and kcompile never configures that backend.
package v20170312

import "errors"

var errUnavailable = errors.New("this flanneld was built without the Tencent Cloud VPC SDK (the module proxy does not serve it): the tencent-vpc backend is unavailable")

// Client is the VPC API client.
type Client struct{}

// NewClientWithSecretId fails: there is no SDK to create a client with.
func NewClientWithSecretId(secretID, secretKey, region string) (*Client, error) {
	return nil, errUnavailable
}

// Filter selects route tables.
type Filter struct {
	Name   *string
	Values []*string
}

// Route is one route of a route table.
type Route struct {
	DestinationCidrBlock *string
	GatewayType          *string
	GatewayId            *string
	RouteId              *uint64
	RouteType            *string
	Enabled              *bool
}

// RouteTable is a VPC route table.
type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

// DescribeRouteTablesRequest lists route tables.
type DescribeRouteTablesRequest struct{ Filters []*Filter }

// DescribeRouteTablesResponse is what DescribeRouteTables answers.
type DescribeRouteTablesResponse struct {
	Response *struct{ RouteTableSet []*RouteTable }
}

// NewDescribeRouteTablesRequest returns an empty request.
func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest {
	return &DescribeRouteTablesRequest{}
}

// DescribeRouteTables fails.
func (c *Client) DescribeRouteTables(*DescribeRouteTablesRequest) (*DescribeRouteTablesResponse, error) {
	return nil, errUnavailable
}

// DeleteRoutesRequest deletes routes of a table.
type DeleteRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// DeleteRoutesResponse is what DeleteRoutes answers.
type DeleteRoutesResponse struct{}

// NewDeleteRoutesRequest returns an empty request.
func NewDeleteRoutesRequest() *DeleteRoutesRequest { return &DeleteRoutesRequest{} }

// DeleteRoutes fails.
func (c *Client) DeleteRoutes(*DeleteRoutesRequest) (*DeleteRoutesResponse, error) {
	return nil, errUnavailable
}

// CreateRoutesRequest adds routes to a table.
type CreateRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// CreateRoutesResponse is what CreateRoutes answers.
type CreateRoutesResponse struct{}

// NewCreateRoutesRequest returns an empty request.
func NewCreateRoutesRequest() *CreateRoutesRequest { return &CreateRoutesRequest{} }

// CreateRoutes fails.
func (c *Client) CreateRoutes(*CreateRoutesRequest) (*CreateRoutesResponse, error) {
	return nil, errUnavailable
}
